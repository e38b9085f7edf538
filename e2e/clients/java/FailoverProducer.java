// The official RocketMQ 5 Java client as e2e/replication/failover.py drives it: one Producer on
// the endpoints given, never restarted, sending one message at a time, each with a unique key
// and its key as body. Prints one line per send on stdout:
//   ack <key> <message id> <queue offset> <started ns> <answered ns>
//   fail <key> <exception class>
// (times from System.nanoTime, CLOCK_MONOTONIC on Linux, as Python's time.monotonic_ns).
// Stops when its standard input closes. Usage:
//   java -cp '<lib>/*' FailoverProducer.java <endpoints a:p;b:p> <topic> <key prefix>
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.java.impl.producer.SendReceiptImpl;

public class FailoverProducer {
  public static void main(String[] args) throws Exception {
    String endpoints = args[0];
    String topic = args[1];
    String prefix = args[2];
    AtomicBoolean done = new AtomicBoolean(false);
    Thread watcher = new Thread(() -> {
      try {
        InputStream in = System.in;
        while (in.read() >= 0) { }
      } catch (Exception ignored) {
      }
      done.set(true);
    });
    watcher.setDaemon(true);
    watcher.start();
    ClientServiceProvider provider = ClientServiceProvider.loadService();
    ClientConfiguration config = ClientConfiguration.newBuilder()
        .setEndpoints(endpoints)
        .setRequestTimeout(Duration.ofSeconds(3))
        .enableSsl(false)
        .build();
    Producer producer = provider.newProducerBuilder()
        .setClientConfiguration(config)
        .setTopics(topic)
        .build();
    System.out.println("ready");
    System.out.flush();
    long number = 0;
    while (!done.get()) {
      number++;
      String key = prefix + number;
      Message message = provider.newMessageBuilder()
          .setTopic(topic)
          .setKeys(key)
          .setBody(key.getBytes(StandardCharsets.UTF_8))
          .build();
      long started = System.nanoTime();
      try {
        SendReceipt receipt = producer.send(message);
        long answered = System.nanoTime();
        long offset = ((SendReceiptImpl) receipt).getOffset();
        System.out.println("ack " + key + " " + receipt.getMessageId() + " " + offset + " "
            + started + " " + answered);
      } catch (Exception e) {
        System.out.println("fail " + key + " " + e.getClass().getSimpleName());
      }
      System.out.flush();
    }
    producer.close();
  }
}
