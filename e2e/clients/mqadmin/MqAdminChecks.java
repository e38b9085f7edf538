// mqadmin's everyday commands (rocketmq-tools 5.3.3, unchanged: MQAdminStartup.main0, what the
// mqadmin script runs) against a Gannet broker, in one JVM, for tests/remoting/test_mqadmin.py.
//
//   java -cp '<classes>:<lib>/*' MqAdminChecks <name server host:port> <kept topic> <topic> <group>
//
// Each check prints "=== <name>", the command's output, then "ok <name>" or "FAIL <name>: why";
// the program exits with the number of failed checks. Between the commands it produces with
// DefaultMQProducer and consumes with DefaultLitePullConsumer (rocketmq-client 5.3.3, which the
// tools depend on), so consumerProgress has offsets to show. The Python test asserts every check
// and reads the kept topic over gRPC afterwards.

import java.io.ByteArrayOutputStream;
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
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.command.MQAdminStartup;

public class MqAdminChecks {
    static int failures = 0;
    static final int COUNT = 6;

    /** Run one mqadmin command, capturing what it prints (stdout and stderr). */
    static String mqadmin(String... args) {
        long started = System.nanoTime();
        PrintStream out = System.out;
        PrintStream err = System.err;
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        PrintStream capture = new PrintStream(buffer, true, StandardCharsets.UTF_8);
        System.setOut(capture);
        System.setErr(capture);
        try {
            MQAdminStartup.main0(args, null);
        } finally {
            System.setOut(out);
            System.setErr(err);
        }
        System.out.printf("(mqadmin %s: %d ms)%n", args[0], (System.nanoTime() - started) / 1_000_000);
        return buffer.toString(StandardCharsets.UTF_8);
    }

    static String check(String name, String output, String... wanted) {
        System.out.println("=== " + name);
        System.out.print(output.endsWith("\n") ? output : output + "\n");
        for (String pattern : wanted) {
            if (!Pattern.compile(pattern, Pattern.MULTILINE).matcher(output).find()) {
                failures++;
                System.out.println("FAIL " + name + ": no line matches " + pattern);
                return output;
            }
        }
        if (output.contains("Exception")) {
            failures++;
            System.out.println("FAIL " + name + ": an exception was printed");
            return output;
        }
        System.out.println("ok " + name);
        return output;
    }

    static void fail(String name, String why) {
        failures++;
        System.out.println("FAIL " + name + ": " + why);
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
        String ns = args[0];
        String kept = args[1];
        String topic = args[2];
        String group = args[3];
        String producerGroup = group + "-producer";

        check("updateTopic", mqadmin("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", kept,
            "-r", "4", "-w", "4"), "create topic to .* success", "readQueueNums=4");
        check("topicList", mqadmin("topicList", "-n", ns), "^" + Pattern.quote(kept) + "$");
        String route = check("topicRoute", mqadmin("topicRoute", "-n", ns, "-t", kept),
            "\"brokerName\"\\s*:\\s*\"broker-a\"", "\"writeQueueNums\"\\s*:\\s*4");
        Matcher addr = Pattern.compile("\"?0\"?\\s*:\\s*\"([^\"]+)\"").matcher(route);
        String broker = addr.find() ? addr.group(1) : "";
        check("clusterList", mqadmin("clusterList", "-n", ns),
            "^DefaultCluster\\s+broker-a\\s+0\\s+" + Pattern.quote(broker) + "\\s+Gannet");
        check("brokerStatus", mqadmin("brokerStatus", "-n", ns, "-b", broker),
            "^brokerVersionDesc\\s*: Gannet", "^commitLogMaxOffset\\s*: \\d+");
        check("updateSubGroup", mqadmin("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g",
            group, "-r", "3"), "create subscription group to .* success");

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
        check("producerConnection", mqadmin("producerConnection", "-n", ns, "-g", producerGroup,
            "-t", topic), "^\\d+\\s+\\S+@\\S+\\s+127\\.0\\.0\\.1:\\d+\\s+JAVA\\s+V5_3_3");

        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setAutoCommit(false);
        consumer.subscribe(topic, "*");
        consumer.start();
        int got = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        while (got < COUNT && System.currentTimeMillis() < deadline) {
            List<MessageExt> polled = consumer.poll(1000);
            got += polled.size();
        }
        consumer.commitSync();
        if (got != COUNT) {
            fail("consume", "got " + got + " of " + COUNT);
        }
        check("consumerConnection", mqadmin("consumerConnection", "-n", ns, "-g", group),
            "^\\S+@\\S+\\s+127\\.0\\.0\\.1:\\d+\\s+JAVA\\s+V5_3_3", "ConsumeType: CONSUME_ACTIVELY",
            "MessageModel: CLUSTERING");
        // commitSync sends its offsets oneway: ask until the broker shows them (20 s at most)
        String progress = mqadmin("consumerProgress", "-n", ns, "-g", group);
        for (int i = 0; i < 80 && column(progress, topic, 4) != COUNT; i++) {
            Thread.sleep(250);
            progress = mqadmin("consumerProgress", "-n", ns, "-g", group);
        }
        check("consumerProgress", progress, "^Consume Diff Total: 0$");
        if (column(progress, topic, 3) != COUNT || column(progress, topic, 4) != COUNT) {
            fail("consumerProgress offsets", "broker and consumer offsets do not sum to " + COUNT);
        }
        consumer.shutdown();

        String status = check("topicStatus", mqadmin("topicStatus", "-n", ns, "-t", topic),
            "^broker-a\\s+0\\s+0\\s+\\d+");
        long stored = 0;
        for (String line : status.split("\n")) {
            String[] cells = line.trim().split("\\s+");
            if (cells.length >= 4 && cells[0].equals("broker-a")) {
                stored += Long.parseLong(cells[3]);
            }
        }
        if (stored != COUNT) {
            fail("topicStatus offsets", "max offsets sum to " + stored + ", not " + COUNT);
        }
        check("queryMsgByKey", mqadmin("queryMsgByKey", "-n", ns, "-t", topic, "-k", "key-3"),
            "^" + Pattern.quote(ids.get(3)) + "\\s");
        check("queryMsgByUniqueKey", mqadmin("queryMsgByUniqueKey", "-n", ns, "-t", topic, "-i",
            ids.get(2)), "^Keys:\\s+\\[key-2\\]", "^Queue Offset:\\s+\\d+");

        check("resetOffsetByTime", mqadmin("resetOffsetByTime", "-n", ns, "-g", group, "-t", topic,
            "-s", "0"), "^broker-a\\s+\\d+\\s+0\\s*$");
        String reset = check("consumerProgress after reset", mqadmin("consumerProgress", "-n", ns,
            "-g", group), "^Consume Diff Total: " + COUNT + "$");
        if (column(reset, topic, 4) != 0) {
            fail("consumerProgress after reset", "consumer offsets are not all 0");
        }

        check("deleteSubGroup", mqadmin("deleteSubGroup", "-n", ns, "-c", "DefaultCluster", "-g",
            group, "-r", "true"), "delete subscription group \\[" + Pattern.quote(group) + "\\] .* success");
        check("deleteTopic", mqadmin("deleteTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic),
            "delete topic \\[" + Pattern.quote(topic) + "\\] from cluster \\[DefaultCluster\\] success");
        producer.shutdown();
        System.out.println("done " + failures);
        System.exit(failures);
    }
}
