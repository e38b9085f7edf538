// The official RocketMQ remoting client (rocketmq-client 4.9.8, unchanged) against Gannet's
// remoting and name-server ports, for tests/remoting/test_official_remoting.py. One program,
// three modes; each prints one line per event so the test reads what was sent and received:
//
//   produce  <namesrv> <topic> <prefix> <count>   DefaultMQProducer: <count> sync sends with
//            keys and alternating tags TagA/TagB and a user property, <count> oneway sends, one
//            batch of <count>, one delayed message (level 1) and one 8 KiB body (compressed by
//            the client); prints "sent <key> <queueId> <queueOffset>", "oneway <key>", then "done"
//   push     <namesrv> <topic> <group> <count> <tags>   DefaultMQPushConsumer from the first
//            offset; prints "got <key> <tag> <bodyLength> <bodyCrc> <property>" per message, stops
//            after <count> distinct keys ("consumed <n>") or 120 s ("timeout <n>")
//   pushretry <namesrv> <topic> <group> <count> <tags>   the same, but every first delivery fails
//            (RECONSUME_LATER, delay level 1): messages are counted when they come back
//   orderly  <namesrv> <topic> <group> <count>   DefaultMQPushConsumer with MessageListenerOrderly
//            (locks its queues with LOCK_BATCH_MQ), same output
//   litepull <namesrv> <topic> <group> <count>   DefaultLitePullConsumer, same output
//   secure   <namesrv> <topic> <deniedTopic> <group> <accessKey> <secretKey> <count>   clients
//            signing with rocketmq-acl's AclClientRPCHook (run with -Dtls.enable=true for TLS):
//            <count> sends ("sent ..."), a send to <deniedTopic>, sends with a wrong secret and
//            an unknown key ("refused <what> <responseCode> <message>" or "accepted <what> ..."),
//            then a signed DefaultLitePullConsumer ("got ...", "consumed <n>"), then "done"
//
// Runs from source (`java -cp "<lib>/*" RemotingClients.java ...`) or compiled by javac.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class RemotingClients {
    static final long DEADLINE_MS = 120_000;

    // Requests to the name server and the broker may wait this long (the client's default is
    // 3 s, which a machine busy with several JVMs starting at once can exceed).
    static final int API_TIMEOUT_MS = 20_000;

    public static void main(String[] args) {
        try {
            switch (args[0]) {
                case "produce": produce(args[1], args[2], args[3], Integer.parseInt(args[4])); break;
                case "push": push(args[1], args[2], args[3], Integer.parseInt(args[4]), args[5], false); break;
                case "pushretry": push(args[1], args[2], args[3], Integer.parseInt(args[4]), args[5], true); break;
                case "orderly": orderly(args[1], args[2], args[3], Integer.parseInt(args[4])); break;
                case "litepull": litePull(args[1], args[2], args[3], Integer.parseInt(args[4])); break;
                case "secure": secure(args[1], args[2], args[3], args[4], args[5], args[6], Integer.parseInt(args[7])); break;
                default: throw new IllegalArgumentException("unknown mode " + args[0]);
            }
        } catch (Throwable e) {
            // the client's threads would keep the JVM alive: end it, failed
            e.printStackTrace();
            System.out.flush();
            System.exit(2);
        }
        System.exit(0);
    }

    static Message message(String topic, String tag, String key, byte[] body) {
        Message msg = new Message(topic, tag, key, body);
        msg.putUserProperty("origin", "remoting");
        return msg;
    }

    static void sent(String key, SendResult result) {
        if (result.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send of " + key + ": " + result);
        }
        System.out.println("sent " + key + " " + result.getMessageQueue().getQueueId() + " "
                + result.getQueueOffset());
    }

    static void produce(String namesrv, String topic, String prefix, int count) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(prefix + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setMqClientApiTimeout(API_TIMEOUT_MS);
        producer.setSendMsgTimeout(10_000);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                String key = prefix + "-sync-" + i;
                String tag = i % 2 == 0 ? "TagA" : "TagB";
                SendResult r = producer.send(message(topic, tag, key, ("body of " + key).getBytes(StandardCharsets.UTF_8)));
                sent(key, r);
                if (i == 0) {
                    // SendResult.offsetMsgId is the broker's offset message id: viewMessage dials
                    // the address inside it (VIEW_MESSAGE_BY_ID); getMsgId() is the unique key
                    MessageExt viewed = producer.viewMessage(r.getOffsetMsgId());
                    System.out.println("viewed " + key + " " + viewed.getKeys() + " "
                            + viewed.getMsgId().equals(r.getMsgId()));
                }
            }
            for (int i = 0; i < count; i++) {
                String key = prefix + "-oneway-" + i;
                producer.sendOneway(message(topic, "TagA", key, ("body of " + key).getBytes(StandardCharsets.UTF_8)));
                System.out.println("oneway " + key);
            }
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                String key = prefix + "-batch-" + i;
                batch.add(message(topic, "TagB", key, ("body of " + key).getBytes(StandardCharsets.UTF_8)));
            }
            SendResult result = producer.send(batch);
            for (int i = 0; i < count; i++) {
                sent(prefix + "-batch-" + i, result);
            }
            String key = prefix + "-delayed";
            Message delayed = message(topic, "TagA", key, ("body of " + key).getBytes(StandardCharsets.UTF_8));
            delayed.setDelayTimeLevel(1);
            sent(key, producer.send(delayed));
            key = prefix + "-large";
            byte[] large = new byte[8192];
            for (int i = 0; i < large.length; i++) {
                large[i] = (byte) ('a' + i % 26);
            }
            sent(key, producer.send(message(topic, "TagB", key, large)));
            System.out.println("done");
        } finally {
            producer.shutdown();
        }
    }

    static synchronized boolean print(MessageExt msg, Set<String> seen) {
        CRC32 crc = new CRC32();
        crc.update(msg.getBody());
        System.out.println("got " + msg.getKeys() + " " + msg.getTags() + " " + msg.getBody().length
                + " " + crc.getValue() + " " + msg.getUserProperty("origin"));
        seen.add(msg.getKeys());
        return true;
    }

    static void push(String namesrv, String topic, String group, int count, String tags, boolean failFirst)
            throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(API_TIMEOUT_MS);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, tags);
        Set<String> seen = new HashSet<>();
        CountDownLatch all = new CountDownLatch(1);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            synchronized (RemotingClients.class) {
                if (failFirst && msgs.get(0).getReconsumeTimes() == 0) {
                    // the first delivery fails: the client sends it back (CONSUMER_SEND_MSG_BACK)
                    // and it comes again from the group's retry topic after delay level 1 (1 s)
                    context.setDelayLevelWhenNextConsume(1);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                for (MessageExt msg : msgs) {
                    print(msg, seen);
                }
                if (seen.size() >= count) {
                    all.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean done = all.await(DEADLINE_MS, TimeUnit.MILLISECONDS);
        synchronized (RemotingClients.class) {
            System.out.println((done ? "consumed " : "timeout ") + seen.size());
        }
        consumer.shutdown();
    }

    static void orderly(String namesrv, String topic, String group, int count) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(API_TIMEOUT_MS);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        Set<String> seen = new HashSet<>();
        CountDownLatch all = new CountDownLatch(1);
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
            synchronized (RemotingClients.class) {
                for (MessageExt msg : msgs) {
                    print(msg, seen);
                }
                if (seen.size() >= count) {
                    all.countDown();
                }
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        boolean done = all.await(DEADLINE_MS, TimeUnit.MILLISECONDS);
        synchronized (RemotingClients.class) {
            System.out.println((done ? "consumed " : "timeout ") + seen.size());
        }
        consumer.shutdown();
    }

    static void litePull(String namesrv, String topic, String group, int count) throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(API_TIMEOUT_MS);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(false);
        consumer.subscribe(topic, "*");
        consumer.start();
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        try {
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (MessageExt msg : consumer.poll(1000)) {
                    print(msg, seen);
                }
                consumer.commitSync();
            }
            System.out.println((seen.size() >= count ? "consumed " : "timeout ") + seen.size());
        } finally {
            consumer.shutdown();
        }
    }

    static AclClientRPCHook signer(String accessKey, String secretKey) {
        return new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
    }

    static DefaultMQProducer signedProducer(String namesrv, String group, String topic,
            String accessKey, String secretKey) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group, signer(accessKey, secretKey));
        producer.setNamesrvAddr(namesrv);
        // the route query too: its 3 s default ran out under load (TLS handshake on a cold JVM),
        // and the send then failed with "No route info of this topic"
        producer.setMqClientApiTimeout(API_TIMEOUT_MS);
        producer.setSendMsgTimeout(API_TIMEOUT_MS);
        producer.start();
        awaitRoute(producer, topic);
        return producer;
    }

    // A started client refreshes every route at once, holding its name-server lock for as long as
    // the first TLS handshake takes; a send waits at most 3 s for that lock (a constant of the
    // 4.x client), then fails with "No route info of this topic" without asking anyone. Under
    // load a cold JVM's handshake takes longer, so the route is fetched first, here, without the
    // lock: the send then finds it (the name server answers every client, signed or not).
    static void awaitRoute(DefaultMQProducer producer, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + API_TIMEOUT_MS;
        while (true) {
            try {
                if (!producer.fetchPublishMessageQueues(topic).isEmpty()) {
                    return;
                }
            } catch (MQClientException e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("no route for " + topic + " within " + API_TIMEOUT_MS + " ms");
            }
            Thread.sleep(100);
        }
    }

    static void refused(String what, DefaultMQProducer producer, String topic) throws Exception {
        byte[] body = what.getBytes(StandardCharsets.UTF_8);
        try {
            SendResult result = producer.send(new Message(topic, "TagA", what, body));
            System.out.println("accepted " + what + " " + result.getSendStatus());
        } catch (MQClientException e) {
            // after its retries the producer wraps the broker's last answer: print that one
            Throwable cause = e.getCause();
            String message = cause instanceof MQBrokerException
                    ? ((MQBrokerException) cause).getErrorMessage() : e.getErrorMessage();
            System.out.println("refused " + what + " " + e.getResponseCode() + " "
                    + String.valueOf(message).replace('\n', ' '));
        } catch (MQBrokerException e) {
            System.out.println("refused " + what + " " + e.getResponseCode() + " "
                    + String.valueOf(e.getErrorMessage()).replace('\n', ' '));
        }
    }

    static void secure(String namesrv, String topic, String denied, String group, String accessKey,
            String secretKey, int count) throws Exception {
        DefaultMQProducer producer = signedProducer(namesrv, "GRemSecP", topic, accessKey, secretKey);
        try {
            for (int i = 0; i < count; i++) {
                String key = "sec" + i;
                sent(key, producer.send(message(topic, "TagA", key, key.getBytes(StandardCharsets.UTF_8))));
            }
            refused("denied", producer, denied);
        } finally {
            producer.shutdown();
        }
        DefaultMQProducer wrong = signedProducer(namesrv, "GRemSecW", topic, accessKey, secretKey + "x");
        try {
            refused("wrongsecret", wrong, topic);
        } finally {
            wrong.shutdown();
        }
        DefaultMQProducer unknown = signedProducer(namesrv, "GRemSecU", topic, "nobody", secretKey);
        try {
            refused("unknownkey", unknown, topic);
        } finally {
            unknown.shutdown();
        }
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group, signer(accessKey, secretKey));
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(API_TIMEOUT_MS);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(false);
        consumer.subscribe(topic, "*");
        consumer.start();
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        try {
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (MessageExt msg : consumer.poll(1000)) {
                    print(msg, seen);
                }
                consumer.commitSync();
            }
            System.out.println((seen.size() >= count ? "consumed " : "timeout ") + seen.size());
        } finally {
            consumer.shutdown();
        }
        System.out.println("done");
    }
}
