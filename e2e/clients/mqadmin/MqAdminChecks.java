// mqadmin's everyday commands (rocketmq-tools 5.3.3, unchanged: MQAdminStartup.main0, what the
// mqadmin script runs) against a Gannet broker, in one JVM, for tests/remoting/test_mqadmin.py.
//
//   java -cp '<classes>:<lib>/*' MqAdminChecks <name server host:port> <kept topic> <topic> <group>
//
// Each check prints "=== <name>", the command's output, then "ok <name>" or "FAIL <name>: why";
// the program exits with the number of failed checks. Each command's output is checked as soon as
// it shows what is wanted, while its client shuts down in the background (see mqadmin()). Between
// the commands it produces with DefaultMQProducer and consumes with DefaultLitePullConsumer
// (rocketmq-client 5.3.3, which the tools depend on), so consumerProgress has offsets to show.
// The Python test asserts every check and reads the kept topic over gRPC afterwards.

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.command.MQAdminStartup;

public class MqAdminChecks {
    static int failures = 0;
    static final int COUNT = 6;
    static final PrintStream OUT = System.out;
    /** What each thread's mqadmin command prints: commands run side by side in the read phase. */
    static final ThreadLocal<ByteArrayOutputStream> PRINTED =
        ThreadLocal.withInitial(ByteArrayOutputStream::new);

    /**
     * Run one mqadmin command on a thread of its own, capturing what it prints, and return its
     * output once every wanted pattern is in it (or the command ended). The command's client then
     * shuts down in the background: that takes up to 3 s (its Netty event thread polls in 3 s
     * steps), and the next command need not wait for it. Commands start one after another, so
     * each has its own client (mqadmin names it by the start time in ms).
     */
    static String mqadmin(String[] wanted, String... args) throws InterruptedException {
        long started = System.nanoTime();
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        Thread command = new Thread(() -> {
            PRINTED.set(buffer);
            MQAdminStartup.main0(args, null);
        });
        command.setDaemon(true);
        command.start();
        long deadline = System.currentTimeMillis() + 60_000;
        String output = "";
        while (command.isAlive() && System.currentTimeMillis() < deadline) {
            output = buffer.toString(StandardCharsets.UTF_8);
            if (matchesAll(output, wanted)) {
                break;
            }
            command.join(10);
        }
        output = buffer.toString(StandardCharsets.UTF_8);
        OUT.printf("(mqadmin %s: %d ms)%n", args[0], (System.nanoTime() - started) / 1_000_000);
        return output;
    }

    static boolean matchesAll(String output, String... wanted) {
        for (String pattern : wanted) {
            if (!Pattern.compile(pattern, Pattern.MULTILINE).matcher(output).find()) {
                return false;
            }
        }
        return true;
    }

    /** Run a command and check its output. */
    static String run(String name, String[] args, String... wanted) throws InterruptedException {
        return check(name, mqadmin(wanted, args), wanted);
    }

    static String[] args(String... args) {
        return args;
    }

    static String check(String name, String output, String... wanted) {
        OUT.println("=== " + name);
        OUT.print(output.endsWith("\n") ? output : output + "\n");
        for (String pattern : wanted) {
            if (!Pattern.compile(pattern, Pattern.MULTILINE).matcher(output).find()) {
                failures++;
                OUT.println("FAIL " + name + ": no line matches " + pattern);
                return output;
            }
        }
        if (output.contains("Exception")) {
            failures++;
            OUT.println("FAIL " + name + ": an exception was printed");
            return output;
        }
        OUT.println("ok " + name);
        return output;
    }

    static void fail(String name, String why) {
        failures++;
        OUT.println("FAIL " + name + ": " + why);
    }

    /** The sum of a column of consumerProgress's queue rows for topic. */
    static long column(String output, String topic, int index) {
        long sum = 0;
        for (String line : output.split("\n")) {
            String[] cells = line.trim().split("\\s+");
            if (cells.length > index && cells[0].equals(topic)) {
                sum += Long.parseLong(cells[index]);
            }
        }
        return sum;
    }

    public static void main(String[] args) throws Exception {
        PrintStream printed = new PrintStream(new OutputStream() {
            @Override
            public void write(int b) {
                PRINTED.get().write(b);
            }

            @Override
            public void write(byte[] bytes, int offset, int length) {
                PRINTED.get().write(bytes, offset, length);
            }
        }, true, StandardCharsets.UTF_8);
        System.setOut(printed);
        System.setErr(printed);
        String ns = args[0];
        String kept = args[1];
        String topic = args[2];
        String group = args[3];
        String producerGroup = group + "-producer";

        run("updateTopic", args("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", kept,
            "-r", "4", "-w", "4"), "create topic to .* success", "readQueueNums=4");
        run("updateSubGroup", args("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g",
            group, "-r", "3"), "create subscription group to .* success", "retryMaxTimes=3");

        DefaultMQProducer producer = new DefaultMQProducer(producerGroup);
        producer.setNamesrvAddr(ns);
        producer.start();
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < COUNT; i++) {
            Message message = new Message(topic, "TagA", "key-" + i,
                ("body " + i).getBytes(StandardCharsets.UTF_8));
            SendResult sent = producer.send(message);
            if (sent.getSendStatus() != SendStatus.SEND_OK) {
                fail("send", sent.toString());
            }
            ids.add(sent.getMsgId());
        }
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setAutoCommit(false);
        consumer.subscribe(topic, "*");
        consumer.start();
        int got = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        while (got < COUNT && System.currentTimeMillis() < deadline) {
            got += consumer.poll(1000).size();
        }
        if (got != COUNT) {
            fail("consume", "got " + got + " of " + COUNT);
        }
        // commit(queues, persist) sends the offsets to the broker now, oneway: consumerProgress
        // is asked until it shows them
        consumer.commit(consumer.assignment(), true);

        run("topicList", args("topicList", "-n", ns), "^" + Pattern.quote(kept) + "$",
            "^" + Pattern.quote(topic) + "$");
        String route = run("topicRoute", args("topicRoute", "-n", ns, "-t", kept),
            "\"brokerName\"\\s*:\\s*\"broker-a\"", "\"writeQueueNums\"\\s*:\\s*4",
            "\"?0\"?\\s*:\\s*\"[^\"]+\"");
        Matcher addr = Pattern.compile("\"?0\"?\\s*:\\s*\"([^\"]+)\"").matcher(route);
        String broker = addr.find() ? addr.group(1) : "";
        run("clusterList", args("clusterList", "-n", ns),
            "^DefaultCluster\\s+broker-a\\s+0\\s+" + Pattern.quote(broker) + "\\s+Gannet");
        run("brokerStatus", args("brokerStatus", "-n", ns, "-b", broker),
            "^brokerVersionDesc\\s*: Gannet", "^commitLogMaxOffset\\s*: \\d+");
        run("producerConnection", args("producerConnection", "-n", ns, "-g", producerGroup, "-t",
            topic), "^\\d+\\s+\\S+@\\S+\\s+127\\.0\\.0\\.1:\\d+\\s+JAVA\\s+V5_3_3");
        run("consumerConnection", args("consumerConnection", "-n", ns, "-g", group),
            "^\\S+@\\S+\\s+127\\.0\\.0\\.1:\\d+\\s+JAVA\\s+V5_3_3",
            "ConsumeType: CONSUME_ACTIVELY", "MessageModel: CLUSTERING", "ConsumeFromWhere: ");
        String[] shown = {"^Consume Inflight Total: "};
        String progress = mqadmin(shown, "consumerProgress", "-n", ns, "-g", group);
        while (column(progress, topic, 4) != COUNT && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
            progress = mqadmin(shown, "consumerProgress", "-n", ns, "-g", group);
        }
        check("consumerProgress", progress, "^Consume Diff Total: 0$", "^Consume Inflight Total: ");
        if (column(progress, topic, 3) != COUNT || column(progress, topic, 4) != COUNT) {
            fail("consumerProgress offsets", "broker and consumer offsets do not sum to " + COUNT);
        }
        consumer.shutdown();
        String stats = run("topicStatus", args("topicStatus", "-n", ns, "-t", topic),
            "^broker-a\\s+0\\s+0\\s+\\d+", "^Topic Put TPS: ");
        long stored = 0;
        for (String line : stats.split("\n")) {
            String[] cells = line.trim().split("\\s+");
            if (cells.length >= 4 && cells[0].equals("broker-a")) {
                stored += Long.parseLong(cells[3]);
            }
        }
        if (stored != COUNT) {
            fail("topicStatus offsets", "max offsets sum to " + stored + ", not " + COUNT);
        }
        run("queryMsgByKey", args("queryMsgByKey", "-n", ns, "-t", topic, "-k", "key-3"),
            "^" + Pattern.quote(ids.get(3)) + "\\s");
        run("queryMsgByUniqueKey", args("queryMsgByUniqueKey", "-n", ns, "-t", topic, "-i",
            ids.get(2)), "^Keys:\\s+\\[key-2\\]", "^Queue Offset:\\s+\\d+");

        run("resetOffsetByTime", args("resetOffsetByTime", "-n", ns, "-g", group, "-t", topic,
            "-s", "0"), "^broker-a\\s+\\d+\\s+0\\s*$");
        String reset = run("consumerProgress after reset", args("consumerProgress", "-n", ns,
            "-g", group), "^Consume Diff Total: " + COUNT + "$", "^Consume Inflight Total: ");
        if (column(reset, topic, 4) != 0) {
            fail("consumerProgress after reset", "consumer offsets are not all 0");
        }

        // the deletes go on after their success lines (the group's retry and DLQ topics, the
        // name servers' KV config): both are waited for until they end
        String[] toTheEnd = {"(?!)"};
        check("deleteSubGroup", mqadmin(toTheEnd, "deleteSubGroup", "-n", ns, "-c",
            "DefaultCluster", "-g", group, "-r", "true"),
            "delete subscription group \\[" + Pattern.quote(group) + "\\] .* success");
        check("deleteTopic", mqadmin(toTheEnd, "deleteTopic", "-n", ns, "-c", "DefaultCluster",
            "-t", topic), "delete topic \\[" + Pattern.quote(topic)
            + "\\] from cluster \\[DefaultCluster\\] success", "from NameServer success");
        OUT.println("done " + failures);  // the producer and the clients still shutting down end here
        System.exit(failures);
    }
}
