// The official RocketMQ remoting client (rocketmq-client 4.9.8, unchanged) as a consumer for
// e2e/replication/failover.py (--client remoting --consumer remoting-push | remoting-lite): one
// DefaultMQPushConsumer (push) or DefaultLitePullConsumer (lite) with its defaults (clustering,
// offsets committed to the broker every 5 s, pulls long-polled; the lite consumer commits what
// it polled before its shutdown), starting at the first offset,
// on the name servers given, never restarted. Prints one line per message delivered to it:
//   got <key> <queue id> <queue offset> <delivered ns>
// (System.nanoTime, CLOCK_MONOTONIC on Linux, as Python's time.monotonic_ns). Stops when its
// standard input closes: shuts the consumer down (which commits its offsets) and prints
// "stopped". Usage:
//   java -cp '<lib>/*' FailoverConsumer.java <push|lite> <name servers a:p;b:p> <topic> <group>
import java.io.InputStream;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class FailoverConsumer {
  static synchronized void delivered(MessageExt m) {
    System.out.println("got " + m.getKeys() + " " + m.getQueueId() + " " + m.getQueueOffset()
        + " " + System.nanoTime());
    System.out.flush();
  }

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    String namesrv = args[1];
    String topic = args[2];
    String group = args[3];
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
    if (mode.equals("push")) {
      DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
      consumer.setNamesrvAddr(namesrv);
      consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
      consumer.subscribe(topic, "*");
      consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
        for (MessageExt m : messages) {
          delivered(m);
        }
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
      });
      consumer.start();
      System.out.println("ready");
      System.out.flush();
      while (!done.get()) {
        Thread.sleep(100);
      }
      consumer.shutdown();
    } else {
      DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
      consumer.setNamesrvAddr(namesrv);
      consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
      consumer.subscribe(topic, "*");
      consumer.start();
      System.out.println("ready");
      System.out.flush();
      while (!done.get()) {
        List<MessageExt> messages = consumer.poll(1000);
        for (MessageExt m : messages) {
          delivered(m);
        }
      }
      // the auto commit moves polled offsets to the offset store only on a later poll (every
      // 5 s) and shutdown persists the store as it is: commit what was polled first
      consumer.commitSync();
      consumer.shutdown();
    }
    System.out.println("stopped");
    System.out.flush();
    System.exit(0);
  }
}
