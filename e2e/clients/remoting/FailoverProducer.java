// The official RocketMQ remoting client (rocketmq-client 4.9.8, unchanged) as
// e2e/replication/failover.py drives it (--client remoting): one DefaultMQProducer with its
// defaults (send timeout 3 s, retryTimesWhenSendFailed 2, sendLatencyFaultEnable false) on the
// name servers given, never restarted, sending one message at a time, each with a unique key and
// its key as body. Prints one line per send on stdout:
//   ack <key> <message id> <queue offset> <started ns> <answered ns>
//   fail <key> <exception class>
// (times from System.nanoTime, CLOCK_MONOTONIC on Linux, as Python's time.monotonic_ns).
// Stops when its standard input closes. Usage:
//   java -cp '<lib>/*' FailoverProducer.java <name servers a:p;b:p> <topic> <key prefix>
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class FailoverProducer {
  public static void main(String[] args) throws Exception {
    String namesrv = args[0];
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
    DefaultMQProducer producer = new DefaultMQProducer("GannetFailoverProducer");
    producer.setNamesrvAddr(namesrv);
    producer.start();
    System.out.println("ready");
    System.out.flush();
    long number = 0;
    while (!done.get()) {
      number++;
      String key = prefix + number;
      Message message = new Message(topic, "", key, key.getBytes(StandardCharsets.UTF_8));
      long started = System.nanoTime();
      try {
        SendResult result = producer.send(message);
        long answered = System.nanoTime();
        if (result.getSendStatus() == SendStatus.SEND_OK) {
          System.out.println("ack " + key + " " + result.getMsgId() + " "
              + result.getQueueOffset() + " " + started + " " + answered);
        } else {
          System.out.println("fail " + key + " " + result.getSendStatus());
        }
      } catch (Exception e) {
        System.out.println("fail " + key + " " + e.getClass().getSimpleName());
      }
      System.out.flush();
    }
    producer.shutdown();
    System.exit(0);
  }
}
