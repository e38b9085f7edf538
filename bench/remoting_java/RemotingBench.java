// The client of the remoting side-by-side benchmark (bench/remoting.py): the official RocketMQ
// remoting client (rocketmq-client 4.9.8, unchanged) against one broker's name server, Gannet's
// or Apache RocketMQ's. One JVM per run; bench/remoting.py drives it over stdin and stdout so that
// it can read the brokers' CPU time (/proc/<pid>/stat) right before and after each phase:
//
//   java RemotingBench <namesrv> <topic> <batchTopic> <warmTopic> <group> <messages> <threads> <warm>
//
//   prints  "ready"                       after the warm-up: every phase once, <warm> messages
//                                         each, on <warmTopic>
//   reads   "go send" | "go batch" | "go pull" | "quit"
//   prints  "done <phase> msgs=<n> failed=<n> seconds=<s> p50_us=<n> p99_us=<n>" per phase
//
//   send   DefaultMQProducer.send(Message): <messages> sync sends of 1 KiB bodies to <topic>
//          from <threads> threads sharing one producer; latency of each send
//   batch  DefaultMQProducer.send(Collection<Message>): batches of 32 x 100 B to <batchTopic>
//          from <threads> threads, <messages> messages in all; latency of each batch
//   pull   DefaultLitePullConsumer (<group>, pullBatchSize 32) assigned every queue of <topic>
//          from its first offset, polling until it holds every message the send phase stored
//          (each checked to be a 1 KiB body)
//
// Any failure ends the JVM with status 2 and a stack trace; a phase longer than PHASE_DEADLINE_MS
// fails too. Compiled once by tests/remoting/java_programs.py, as the tests' Java programs are.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class RemotingBench {
    static final int BODY_BYTES = 1024;
    static final int BATCH_MESSAGES = 32;
    static final int BATCH_BODY_BYTES = 100;
    static final int PULL_BATCH_SIZE = 32;
    static final long PHASE_DEADLINE_MS = 300_000;
    // Requests may wait this long (the client's default of 3 s is short on a machine loaded 10x).
    static final int API_TIMEOUT_MS = 20_000;

    final String namesrv;
    final String topic;
    final String batchTopic;
    final String warmTopic;
    final String group;
    final int messages;
    final int threads;
    final int warmMessages;
    final DefaultMQProducer producer;
    final DefaultLitePullConsumer consumer;
    long storedOnTopic;

    RemotingBench(String[] args) {
        namesrv = args[0];
        topic = args[1];
        batchTopic = args[2];
        warmTopic = args[3];
        group = args[4];
        messages = Integer.parseInt(args[5]);
        threads = Integer.parseInt(args[6]);
        warmMessages = Integer.parseInt(args[7]);
        if (messages < threads || warmMessages < threads || threads < 1) {
            throw new IllegalArgumentException("need messages, warm >= threads >= 1, got "
                    + messages + ", " + warmMessages + ", " + threads);
        }
        producer = new DefaultMQProducer(group + "Producer");
        producer.setNamesrvAddr(namesrv);
        producer.setMqClientApiTimeout(API_TIMEOUT_MS);
        producer.setSendMsgTimeout(API_TIMEOUT_MS);
        consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(API_TIMEOUT_MS);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPullBatchSize(PULL_BATCH_SIZE);
    }

    public static void main(String[] args) {
        try {
            new RemotingBench(args).run();
        } catch (Throwable e) {
            // the client's threads would keep the JVM alive: end it, failed
            e.printStackTrace();
            System.out.flush();
            System.exit(2);
        }
        System.exit(0);
    }

    void run() throws Exception {
        producer.start();
        consumer.start();
        try {
            for (String t : new String[] {topic, batchTopic, warmTopic}) {
                awaitRoute(t);
            }
            warmUp();
            System.out.println("ready");
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null && !line.equals("quit")) {
                String phase = line.startsWith("go ") ? line.substring(3) : "";
                Phase done;
                switch (phase) {
                    case "send": done = sends(topic, messages, false); storedOnTopic = done.msgs; break;
                    case "batch": done = sends(batchTopic, messages, true); break;
                    case "pull": done = pull(topic, storedOnTopic); break;
                    default: throw new IllegalArgumentException("unknown command " + line);
                }
                System.out.println("done " + phase + " " + done);
                System.out.flush();
            }
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
    }

    // The same three paths once on the warm-up topic: both JVMs' JIT, connections, routes.
    void warmUp() throws Exception {
        Phase sent = sends(warmTopic, warmMessages, false);
        sends(warmTopic, warmMessages, true);
        pull(warmTopic, sent.msgs);
    }

    void awaitRoute(String t) throws Exception {
        long deadline = System.currentTimeMillis() + API_TIMEOUT_MS;
        while (true) {
            try {
                if (!producer.fetchPublishMessageQueues(t).isEmpty()) {
                    return;
                }
            } catch (MQClientException e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("no route for " + t + " within " + API_TIMEOUT_MS + " ms");
            }
            Thread.sleep(100);
        }
    }

    static final class Phase {
        final long msgs;
        final long failed;
        final double seconds;
        final long p50Us;
        final long p99Us;

        Phase(long msgs, long failed, double seconds, long[] latenciesNs) {
            this.msgs = msgs;
            this.failed = failed;
            this.seconds = seconds;
            Arrays.sort(latenciesNs);
            this.p50Us = quantileUs(latenciesNs, 0.50);
            this.p99Us = quantileUs(latenciesNs, 0.99);
        }

        static long quantileUs(long[] sorted, double q) {
            if (sorted.length == 0) {
                return 0;
            }
            int index = (int) Math.ceil(q * sorted.length) - 1;  // nearest rank
            return sorted[Math.max(0, Math.min(sorted.length - 1, index))] / 1000;
        }

        @Override
        public String toString() {
            return String.format("msgs=%d failed=%d seconds=%.4f p50_us=%d p99_us=%d", msgs, failed, seconds, p50Us, p99Us);
        }
    }

    // <count> messages from <threads> threads, one message per send or BATCH_MESSAGES per send.
    Phase sends(String t, int count, boolean batched) throws Exception {
        int perSend = batched ? BATCH_MESSAGES : 1;
        int calls = (count + perSend - 1) / perSend;
        byte[] body = new byte[batched ? BATCH_BODY_BYTES : BODY_BYTES];
        Arrays.fill(body, (byte) 'r');
        long[] latenciesNs = new long[calls];
        AtomicLong next = new AtomicLong();
        AtomicLong stored = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        long began = System.nanoTime();
        List<Future<?>> running = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            running.add(pool.submit(() -> {
                long call;
                while ((call = next.getAndIncrement()) < calls) {
                    int n = (int) Math.min(perSend, count - call * perSend);
                    long start = System.nanoTime();
                    try {
                        SendResult result = batched
                                ? producer.send(batch(t, n, body))
                                : producer.send(new Message(t, "bench", body));
                        if (result.getSendStatus() != SendStatus.SEND_OK) {
                            throw new IllegalStateException("send status " + result.getSendStatus());
                        }
                        stored.addAndGet(n);
                    } catch (Exception e) {
                        failed.addAndGet(n);
                        System.err.println("send failed: " + e);
                    }
                    latenciesNs[(int) call] = System.nanoTime() - start;
                }
                return null;
            }));
        }
        pool.shutdown();
        if (!pool.awaitTermination(PHASE_DEADLINE_MS, TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("the sends did not finish within " + PHASE_DEADLINE_MS + " ms");
        }
        for (Future<?> f : running) {
            f.get();
        }
        double seconds = (System.nanoTime() - began) / 1e9;
        return new Phase(stored.get(), failed.get(), seconds, latenciesNs);
    }

    static Collection<Message> batch(String t, int n, byte[] body) {
        List<Message> batch = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            batch.add(new Message(t, "bench", body));
        }
        return batch;
    }

    // Drains <wanted> messages of <t> from the first offset of each of its queues.
    Phase pull(String t, long wanted) throws Exception {
        Collection<MessageQueue> queues = consumer.fetchMessageQueues(t);
        long began = System.nanoTime();
        consumer.assign(queues);
        long got = 0;
        long deadline = System.currentTimeMillis() + PHASE_DEADLINE_MS;
        int bodyBytes = t.equals(warmTopic) ? -1 : BODY_BYTES;  // the warm topic has both sizes
        while (got < wanted) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("pulled " + got + " of " + wanted + " within " + PHASE_DEADLINE_MS + " ms");
            }
            for (MessageExt msg : consumer.poll(1000)) {
                if (!msg.getTopic().equals(t)) {
                    continue;  // left in the client's cache by the warm-up's assignment
                }
                if (bodyBytes >= 0 && msg.getBody().length != bodyBytes) {
                    throw new IllegalStateException("a " + msg.getBody().length + "-byte body at " + msg.getQueueOffset()
                            + " of queue " + msg.getQueueId() + ", wanted " + bodyBytes);
                }
                got++;
            }
        }
        double seconds = (System.nanoTime() - began) / 1e9;
        return new Phase(got, 0, seconds, new long[0]);
    }
}
