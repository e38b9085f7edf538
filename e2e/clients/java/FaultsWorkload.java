// The official RocketMQ 5 Java client as a workload of e2e/faults (e2e/faults/java_workload.py):
// one JVM running a Producer that sends to one topic (a message at a time, paced, key = body, a
// raised send retried twice with the same key, each retry a new operation) and a SimpleConsumer
// in its own group on that topic (receive 16, change the invisible time of some, ack each).
// Prints the history as the Python workload keeps it, one JSON object a line on stdout:
//   {"t_ns": <System.nanoTime>, "process": ..., "type": invoke|ok|fail|info, "f": ..., "value": {...}}
// (System.nanoTime is CLOCK_MONOTONIC on Linux, as Python's time.monotonic). "ready" comes first,
// once both clients are up. Standard input: a line "stop-sends" ends the sends; its end stops
// the consumer and exits. Usage:
//   java -cp '<lib>/*' FaultsWorkload.java <endpoints a:p;b:p> <topic> <group> <sender name>
//       <consumer name> <rate per s> <seed>
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.java.impl.producer.SendReceiptImpl;
import org.apache.rocketmq.client.java.message.MessageViewImpl;

public class FaultsWorkload {
  static final int RETRIES = 2;
  static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(3);
  static final Duration AWAIT = Duration.ofSeconds(5);
  static final Duration INVISIBLE = Duration.ofSeconds(10);
  static final Duration CHANGED_INVISIBLE = Duration.ofSeconds(12);
  static final double CHANGE_SHARE = 0.2;
  static final int RECEIVE_MAX = 16;

  static final CountDownLatch sendsStopped = new CountDownLatch(1);
  static final CountDownLatch inputClosed = new CountDownLatch(1);

  public static void main(String[] args) throws Exception {
    if (args.length != 7) {
      System.err.println("usage: FaultsWorkload <endpoints> <topic> <group> <sender> <consumer>"
          + " <rate per s> <seed>");
      System.exit(2);
    }
    String endpoints = args[0];
    String topic = args[1];
    String group = args[2];
    String sender = args[3];
    String consumerName = args[4];
    double ratePerS = Double.parseDouble(args[5]);
    long seed = Long.parseLong(args[6]);
    Thread input = new Thread(() -> {
      try (BufferedReader in = new BufferedReader(
          new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
        String line;
        while ((line = in.readLine()) != null) {
          if (line.trim().equals("stop-sends")) {
            sendsStopped.countDown();
          }
        }
      } catch (Exception ignored) {
        // the end of input is the end of the run either way
      }
      sendsStopped.countDown();
      inputClosed.countDown();
    });
    input.setDaemon(true);
    input.start();
    ClientServiceProvider provider = ClientServiceProvider.loadService();
    ClientConfiguration config = ClientConfiguration.newBuilder()
        .setEndpoints(endpoints)
        .setRequestTimeout(REQUEST_TIMEOUT)
        .enableSsl(false)
        .build();
    Producer producer = provider.newProducerBuilder()
        .setClientConfiguration(config)
        .setTopics(topic)
        .build();
    SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
        .setClientConfiguration(config)
        .setConsumerGroup(group)
        .setAwaitDuration(AWAIT)
        .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
        .build();
    emitLine("ready");
    Thread sends = new Thread(() -> send(provider, producer, topic, sender, ratePerS));
    sends.start();
    Thread pops = new Thread(() -> pop(consumer, consumerName, new Random(seed)));
    pops.setDaemon(true);
    pops.start();
    sends.join();
    inputClosed.await();
    pops.interrupt();
    pops.join(10_000);
    producer.close();
    consumer.close();
    System.out.flush();
    System.exit(0);
  }

  static void send(ClientServiceProvider provider, Producer producer, String topic,
      String process, double ratePerS) {
    long intervalNs = (long) (1e9 / ratePerS);
    long nextAt = System.nanoTime();
    long number = 0;
    while (sendsStopped.getCount() > 0) {
      number++;
      String key = process + "-" + number;
      for (int attempt = 0; attempt <= RETRIES; attempt++) {
        if (sendOnce(provider, producer, topic, process, key) || sendsStopped.getCount() == 0) {
          break;
        }
      }
      nextAt += intervalNs;
      long now = System.nanoTime();
      try {
        sendsStopped.await(Math.max(0, nextAt - now), java.util.concurrent.TimeUnit.NANOSECONDS);
      } catch (InterruptedException e) {
        return;
      }
      nextAt = Math.max(nextAt, System.nanoTime() - intervalNs);
    }
  }

  static boolean sendOnce(ClientServiceProvider provider, Producer producer, String topic,
      String process, String key) {
    Message message = provider.newMessageBuilder()
        .setTopic(topic)
        .setKeys(key)
        .setBody(key.getBytes(StandardCharsets.UTF_8))
        .build();
    emit(process, "invoke", "send", "\"key\":" + json(key) + ",\"group\":\"\"");
    try {
      SendReceipt receipt = producer.send(message);
      long offset = ((SendReceiptImpl) receipt).getOffset();
      emit(process, "ok", "send", "\"key\":" + json(key) + ",\"group\":\"\",\"id\":"
          + json(receipt.getMessageId().toString()) + ",\"offset\":" + offset);
      return true;
    } catch (Exception e) { // unknown outcome: it may have been stored
      emit(process, "info", "send", "\"key\":" + json(key) + ",\"error\":" + json(name(e)));
      return false;
    }
  }

  static void pop(SimpleConsumer consumer, String process, Random random) {
    while (!Thread.currentThread().isInterrupted()) {
      emit(process, "invoke", "receive", "");
      List<MessageView> messages;
      try {
        messages = consumer.receive(RECEIVE_MAX, INVISIBLE);
      } catch (Exception e) {
        emit(process, "fail", "receive", "\"error\":" + json(name(e)));
        try {
          Thread.sleep(200); // a pause before the next receive, as the Python consumer's
        } catch (InterruptedException stop) {
          return;
        }
        continue;
      }
      List<String> delivered = new ArrayList<>();
      List<String[]> got = new ArrayList<>();
      for (MessageView m : messages) {
        String key = StandardCharsets.UTF_8.decode(m.getBody().duplicate()).toString();
        String id = m.getMessageId().toString();
        String copy = storedCopy(((MessageViewImpl) m).getReceiptHandle());
        got.add(new String[] {key, id, copy});
        delivered.add("{\"key\":" + json(key) + ",\"id\":" + json(id) + ",\"copy\":" + json(copy)
            + ",\"attempt\":" + m.getDeliveryAttempt() + "}");
      }
      emit(process, "ok", "receive", "\"messages\":[" + String.join(",", delivered) + "]");
      for (int i = 0; i < messages.size(); i++) {
        MessageView m = messages.get(i);
        String[] g = got.get(i);
        String fields = "\"key\":" + json(g[0]) + ",\"id\":" + json(g[1]) + ",\"copy\":"
            + json(g[2]);
        if (random.nextDouble() < CHANGE_SHARE) {
          emit(process, "invoke", "change", fields);
          try {
            consumer.changeInvisibleDuration(m, CHANGED_INVISIBLE);
            emit(process, "ok", "change", fields);
          } catch (Exception e) {
            emit(process, "info", "change", fields + ",\"error\":" + json(name(e)));
          }
        }
        emit(process, "invoke", "ack", fields);
        try {
          consumer.ack(m);
          emit(process, "ok", "ack", fields);
        } catch (Exception e) { // an ack whose answer was lost may have taken effect
          emit(process, "info", "ack", fields + ",\"error\":" + json(name(e)));
        }
      }
    }
  }

  /** The stored copy a delivery is: topic flag, queue and queue offset of its receipt handle
   * (docs/formats/pop.md), as e2e/faults/workload.py's stored_copy. */
  static String storedCopy(String receiptHandle) {
    String[] fields = receiptHandle.split(" ");
    if (fields.length < 8) {
      return receiptHandle;
    }
    return fields[4] + "/" + fields[6] + "/" + fields[7];
  }

  static String name(Exception e) {
    String text = e.getClass().getSimpleName() + ": " + e.getMessage();
    return text.length() > 160 ? text.substring(0, 160) : text;
  }

  static synchronized void emit(String process, String type, String f, String value) {
    System.out.println("{\"t_ns\":" + System.nanoTime() + ",\"process\":" + json(process)
        + ",\"type\":" + json(type) + ",\"f\":" + json(f) + ",\"value\":{" + value + "}}");
    System.out.flush();
  }

  static synchronized void emitLine(String line) {
    System.out.println(line);
    System.out.flush();
  }

  static String json(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }
}
