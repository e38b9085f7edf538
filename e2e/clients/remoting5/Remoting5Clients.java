// The official RocketMQ 5.x remoting client (rocketmq-client 5.3.3, unchanged) against Gannet's
// remoting and name-server ports, for tests/remoting/test_remoting5.py. One JVM runs every
// scenario named on the command line, in order, but the two that wait on a timer ("pop": the
// client's fixed 10 s retry delay, "tx": the broker's check-back) each on a thread of its own
// beside the others (every scenario has its own topics and groups), and prints one line per
// event:
//
//   Remoting5Clients <namesrv> <prefix> <scenario>...
//
//   send   DefaultMQProducer: 4 sync sends to <prefix>Send with keys and tags TagA/TagB;
//          prints "sent <key> <queueId> <queueOffset> <msgId>"
//   tx     TransactionMQProducer (group <prefix>TxG) on <prefix>Tx: "<prefix>-commit" committed
//          by the local transaction, "<prefix>-rollback" rolled back, "<prefix>-check" left
//          UNKNOW and committed when the broker checks it back (CHECK_TRANSACTION_STATE);
//          prints "half <key> <status> <transactionId>" per send and "checked <key> <txid>"
//          when the broker's check arrives (waits for it up to 60 s)
//   pop    DefaultMQPushConsumer in pop mode (setClientRebalance(false): QUERY_ASSIGNMENT,
//          POP_MESSAGE, ACK_MESSAGE) of group <prefix>PopG, tag TagA, on <prefix>Pop, after a
//          DefaultMQProducer sent 3 TagA and 2 TagB messages there; the first delivery of
//          "<prefix>-pop-1" fails (RECONSUME_LATER: CHANGE_MESSAGE_INVISIBLETIME, back after
//          the client's 10 s) and must come back; prints "popped <key> <tag> <reconsumeTimes>
//          <brokerName> <POP_CK with '|' for ' '>" per delivery and "pop-done <n>" once every
//          TagA message was consumed (up to 60 s)
//   batchack  the client's MQClientAPIImpl as the 5.x proxy and Pop consumers use it: 3 sends to
//          <prefix>Batch, POP_MESSAGE (group <prefix>BatchG) until all 3 are popped, then ONE
//          BATCH_ACK_MESSAGE (batchAckMessageAsync: the extra infos grouped by checkpoint, bit
//          sets) of the first two, then a single ACK_MESSAGE of each of the 3; prints
//          "batch-acked <AckStatus>" and "acked-after <key> <AckStatus>" (the two batch-acked
//          ones are gone: NO_EXIST; the third OK)
//
//   ids    DefaultMQProducer: a send and a batch of 2 to <prefix>Ids; SendResult.getOffsetMsgId()
//          (the broker's offset message id) viewed through MQAdminImpl.viewMessage (dials the
//          address inside it: VIEW_MESSAGE_BY_ID, no fallback), SendResult.getMsgId() (the
//          unique key) found by queryMessageByUniqKey; prints "ids <key> <offsetMsgId>",
//          "viewed <key> <keys found> <msgId found equals the unique key>" per message and
//          "queried <key> <keys found>"
//   sqlquote  DefaultMQPushConsumer (group <prefix>QuoteG) subscribing <prefix>Quote with
//          MessageSelector.bySql("`num` > 1") (RocketMQ's SQL92 has no quoted identifiers):
//          start() must fail; prints "refused <responseCode> <message>"
//   orderpop  MQClientAPIImpl as an orderly Pop consumer: a send to <prefix>Ord, POP_MESSAGE
//          with order=true (group <prefix>OrdG, orderly), the message's invisible time changed
//          to 0 (consumed, not acked), popped again, acked; prints "orderpop <n> <key>
//          <reconsumeTimes>" per pop (the second pop's reconsume times come from the answer's
//          orderCountInfo)
//
// Each scenario ends with "ok <scenario>"; an error ends the JVM with exit 2.
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQAdminImpl;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class Remoting5Clients {
    static final long WAIT_S = 60;
    static final int API_TIMEOUT_MS = 20_000;
    static final java.util.List<DefaultMQProducer> open =
            java.util.Collections.synchronizedList(new java.util.ArrayList<>());

    interface Scenario {
        void run() throws Exception;
    }

    /** Runs a scenario on a thread of its own; "ok <name>" once it ends, exit 2 if it fails. */
    static Thread beside(String name, Scenario scenario) {
        Thread thread = new Thread(() -> {
            try {
                scenario.run();
                System.out.println("ok " + name);
                System.out.flush();
            } catch (Throwable e) {
                e.printStackTrace();
                System.out.flush();
                System.exit(2);
            }
        }, name);
        thread.start();
        return thread;
    }

    public static void main(String[] args) {
        try {
            String namesrv = args[0];
            String prefix = args[1];
            List<Thread> besides = new ArrayList<>();
            for (int i = 2; i < args.length; i++) {
                switch (args[i]) {
                    case "send": send(namesrv, prefix); break;
                    case "tx": besides.add(beside("tx", () -> transactions(namesrv, prefix))); continue;
                    case "pop": besides.add(beside("pop", () -> pop(namesrv, prefix))); continue;
                    case "batchack": batchAck(namesrv, prefix); break;
                    case "ids": ids(namesrv, prefix); break;
                    case "sqlquote": sqlQuote(namesrv, prefix); break;
                    case "orderpop": orderPop(namesrv, prefix); break;
                    default: throw new IllegalArgumentException("unknown scenario " + args[i]);
                }
                System.out.println("ok " + args[i]);
                System.out.flush();
            }
            for (Thread thread : besides) thread.join();
            for (DefaultMQProducer p : open) p.shutdown();
        } catch (Throwable e) {
            // the client's threads would keep the JVM alive: end it, failed
            e.printStackTrace();
            System.out.flush();
            System.exit(2);
        }
        System.exit(0);
    }

    static DefaultMQProducer producer(DefaultMQProducer p, String namesrv) throws Exception {
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(API_TIMEOUT_MS);
        p.setMqClientApiTimeout(API_TIMEOUT_MS);
        p.start();
        return p;
    }

    static void checkSent(String key, SendResult result) {
        if (result.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send of " + key + ": " + result);
        }
    }

    static void send(String namesrv, String prefix) throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(prefix + "SendG"), namesrv);
        try {
            for (int i = 0; i < 4; i++) {
                String key = prefix + "-send-" + i;
                String tag = i % 2 == 0 ? "TagA" : "TagB";
                Message msg = new Message(prefix + "Send", tag, key, ("body " + key).getBytes(StandardCharsets.UTF_8));
                SendResult r = p.send(msg);
                checkSent(key, r);
                System.out.println("sent " + key + " " + r.getMessageQueue().getQueueId() + " "
                        + r.getQueueOffset() + " " + r.getMsgId());
            }
        } finally {
            p.shutdown();
        }
    }

    static void transactions(String namesrv, String prefix) throws Exception {
        CountDownLatch checked = new CountDownLatch(1);
        TransactionMQProducer p = new TransactionMQProducer(prefix + "TxG");
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String key = msg.getKeys();
                if (key.endsWith("-commit")) return LocalTransactionState.COMMIT_MESSAGE;
                if (key.endsWith("-rollback")) return LocalTransactionState.ROLLBACK_MESSAGE;
                return LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                System.out.println("checked " + msg.getKeys() + " " + msg.getTopic() + " "
                        + msg.getTransactionId());
                System.out.flush();
                if (!msg.getKeys().endsWith("-check")) return LocalTransactionState.ROLLBACK_MESSAGE;
                checked.countDown();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer(p, namesrv);
        try {
            for (String kind : new String[] {"commit", "rollback", "check"}) {
                String key = prefix + "-" + kind;
                Message msg = new Message(prefix + "Tx", "TagT", key, ("body " + key).getBytes(StandardCharsets.UTF_8));
                TransactionSendResult r = p.sendMessageInTransaction(msg, null);
                checkSent(key, r);
                System.out.println("half " + key + " " + r.getLocalTransactionState() + " "
                        + r.getTransactionId());
                System.out.flush();
            }
            if (!checked.await(WAIT_S, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no CHECK_TRANSACTION_STATE came in " + WAIT_S + " s");
            }
        } catch (Exception e) {
            p.shutdown();
            throw e;
        }
        // the answer to the check is a oneway END_TRANSACTION sent after the listener returns:
        // the producer stays up until the JVM ends, the test awaits the commit in the store
        open.add(p);
    }

    static void pop(String namesrv, String prefix) throws Exception {
        String topic = prefix + "Pop";
        DefaultMQProducer p = producer(new DefaultMQProducer(prefix + "PopSendG"), namesrv);
        Set<String> wanted = ConcurrentHashMap.newKeySet();
        try {
            for (int i = 0; i < 5; i++) {
                String key = prefix + "-pop-" + i;
                String tag = i < 3 ? "TagA" : "TagB";
                if (i < 3) wanted.add(key);
                checkSent(key, p.send(new Message(topic, tag, key, ("body " + key).getBytes(StandardCharsets.UTF_8))));
            }
        } finally {
            p.shutdown();
        }
        CountDownLatch done = new CountDownLatch(1);
        Map<String, Integer> deliveries = new ConcurrentHashMap<>();
        String failing = prefix + "-pop-1";
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(prefix + "PopG");
        c.setNamesrvAddr(namesrv);
        c.setMqClientApiTimeout(API_TIMEOUT_MS);
        c.setClientRebalance(false);
        c.setPopInvisibleTime(20_000);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "TagA");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                int n = deliveries.merge(m.getKeys(), 1, Integer::sum);
                System.out.println("popped " + m.getKeys() + " " + m.getTags() + " " + m.getReconsumeTimes()
                        + " " + m.getBrokerName() + " " + m.getProperty("POP_CK").replace(' ', '|'));
                System.out.flush();
                if (m.getKeys().equals(failing) && n == 1) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                wanted.remove(m.getKeys());
            }
            if (wanted.isEmpty()) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            if (!done.await(WAIT_S, TimeUnit.SECONDS)) {
                throw new IllegalStateException("not consumed in " + WAIT_S + " s: " + wanted);
            }
            System.out.println("pop-done " + deliveries.size());
        } finally {
            c.shutdown();
        }
    }

    static AckCallback acking(CompletableFuture<AckResult> result) {
        return new AckCallback() {
            @Override
            public void onSuccess(AckResult r) { result.complete(r); }

            @Override
            public void onException(Throwable e) { result.completeExceptionally(e); }
        };
    }

    static void batchAck(String namesrv, String prefix) throws Exception {
        String topic = prefix + "Batch";
        String group = prefix + "BatchG";
        DefaultMQProducer p = producer(new DefaultMQProducer(prefix + "BatchSendG"), namesrv);
        try {
            String brokerName = null;
            for (int i = 0; i < 3; i++) {
                String key = prefix + "-batch-" + i;
                SendResult r = p.send(new Message(topic, "TagA", key, ("body " + key).getBytes(StandardCharsets.UTF_8)));
                checkSent(key, r);
                brokerName = r.getMessageQueue().getBrokerName();
            }
            MQClientInstance factory = p.getDefaultMQProducerImpl().getMqClientFactory();
            MQClientAPIImpl api = factory.getMQClientAPIImpl();
            String addr = factory.findBrokerAddressInPublish(brokerName);
            List<MessageExt> popped = new ArrayList<>();
            long deadline = System.currentTimeMillis() + WAIT_S * 1000;
            while (popped.size() < 3) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("popped only " + popped.size() + " in " + WAIT_S + " s");
                }
                PopMessageRequestHeader h = new PopMessageRequestHeader();
                h.setConsumerGroup(group);
                h.setTopic(topic);
                h.setQueueId(-1);
                h.setMaxMsgNums(32);
                h.setInvisibleTime(60_000);
                h.setPollTime(1_000);
                h.setBornTime(System.currentTimeMillis());
                h.setInitMode(0);
                h.setExpType("TAG");
                h.setExp("*");
                CompletableFuture<PopResult> result = new CompletableFuture<>();
                api.popMessageAsync(brokerName, addr, h, API_TIMEOUT_MS, new PopCallback() {
                    @Override
                    public void onSuccess(PopResult r) { result.complete(r); }

                    @Override
                    public void onException(Throwable e) { result.completeExceptionally(e); }
                });
                PopResult r = result.get(WAIT_S, TimeUnit.SECONDS);
                if (r.getPopStatus() == PopStatus.FOUND) popped.addAll(r.getMsgFoundList());
            }
            popped.sort((a, b) -> a.getKeys().compareTo(b.getKeys()));
            List<String> extraInfos = new ArrayList<>();
            for (MessageExt m : popped.subList(0, 2)) extraInfos.add(m.getProperty("POP_CK"));
            CompletableFuture<AckResult> batch = new CompletableFuture<>();
            api.batchAckMessageAsync(addr, API_TIMEOUT_MS, acking(batch), topic, group, extraInfos);
            System.out.println("batch-acked " + batch.get(WAIT_S, TimeUnit.SECONDS).getStatus());
            for (MessageExt m : popped) {
                AckMessageRequestHeader h = new AckMessageRequestHeader();
                h.setConsumerGroup(group);
                h.setTopic(topic);
                h.setQueueId(m.getQueueId());
                h.setExtraInfo(m.getProperty("POP_CK"));
                h.setOffset(m.getQueueOffset());
                CompletableFuture<AckResult> single = new CompletableFuture<>();
                api.ackMessageAsync(addr, API_TIMEOUT_MS, acking(single), h);
                System.out.println("acked-after " + m.getKeys() + " "
                        + single.get(WAIT_S, TimeUnit.SECONDS).getStatus());
            }
            System.out.flush();
        } finally {
            p.shutdown();
        }
    }

    static void ids(String namesrv, String prefix) throws Exception {
        String topic = prefix + "Ids";
        DefaultMQProducer p = producer(new DefaultMQProducer(prefix + "IdsG"), namesrv);
        try {
            MQAdminImpl admin = p.getDefaultMQProducerImpl().getMqClientFactory().getMQAdminImpl();
            String key = prefix + "-ids-0";
            SendResult r = p.send(new Message(topic, "TagI", key, ("body " + key).getBytes(StandardCharsets.UTF_8)));
            checkSent(key, r);
            List<String> keys = new ArrayList<>();
            List<String> uniq = new ArrayList<>();
            List<String> offsetIds = new ArrayList<>();
            keys.add(key);
            uniq.add(r.getMsgId());
            offsetIds.add(r.getOffsetMsgId());
            List<Message> batch = new ArrayList<>();
            for (int i = 1; i < 3; i++) {
                batch.add(new Message(topic, "TagI", prefix + "-ids-" + i, ("body " + i).getBytes(StandardCharsets.UTF_8)));
                keys.add(prefix + "-ids-" + i);
            }
            SendResult b = p.send(batch);
            checkSent("batch", b);
            uniq.addAll(java.util.Arrays.asList(b.getMsgId().split(",")));
            offsetIds.addAll(java.util.Arrays.asList(b.getOffsetMsgId().split(",")));
            for (int i = 0; i < keys.size(); i++) {
                System.out.println("ids " + keys.get(i) + " " + offsetIds.get(i));
                MessageExt viewed = admin.viewMessage(topic, offsetIds.get(i));
                System.out.println("viewed " + keys.get(i) + " " + viewed.getKeys() + " "
                        + viewed.getMsgId().equals(uniq.get(i)));
                MessageExt queried = admin.queryMessageByUniqKey(topic, uniq.get(i));
                System.out.println("queried " + keys.get(i) + " " + queried.getKeys());
            }
            System.out.flush();
        } finally {
            p.shutdown();
        }
    }

    static void sqlQuote(String namesrv, String prefix) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(prefix + "QuoteG");
        c.setNamesrvAddr(namesrv);
        c.setMqClientApiTimeout(API_TIMEOUT_MS);
        c.subscribe(prefix + "Quote", MessageSelector.bySql("`num` > 1"));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        try {
            c.start();
            throw new IllegalStateException("a backquoted SQL92 subscription was accepted");
        } catch (MQClientException e) {
            System.out.println("refused " + e.getResponseCode() + " " + e.getErrorMessage().replace('\n', ' '));
            System.out.flush();
        } finally {
            c.shutdown();
        }
    }

    static MessageExt popOrderly(MQClientAPIImpl api, String brokerName, String addr, String topic,
            String group) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT_S * 1000;
        while (System.currentTimeMillis() < deadline) {
            PopMessageRequestHeader h = new PopMessageRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(topic);
            h.setQueueId(-1);
            h.setMaxMsgNums(1);
            h.setInvisibleTime(60_000);
            h.setPollTime(1_000);
            h.setBornTime(System.currentTimeMillis());
            h.setInitMode(0);
            h.setExpType("TAG");
            h.setExp("*");
            h.setOrder(true);
            CompletableFuture<PopResult> result = new CompletableFuture<>();
            api.popMessageAsync(brokerName, addr, h, API_TIMEOUT_MS, new PopCallback() {
                @Override
                public void onSuccess(PopResult r) { result.complete(r); }

                @Override
                public void onException(Throwable e) { result.completeExceptionally(e); }
            });
            PopResult r = result.get(WAIT_S, TimeUnit.SECONDS);
            if (r.getPopStatus() == PopStatus.FOUND && !r.getMsgFoundList().isEmpty()) {
                return r.getMsgFoundList().get(0);
            }
        }
        throw new IllegalStateException("nothing popped in " + WAIT_S + " s");
    }

    static void orderPop(String namesrv, String prefix) throws Exception {
        String topic = prefix + "Ord";
        String group = prefix + "OrdG";
        DefaultMQProducer p = producer(new DefaultMQProducer(prefix + "OrdSendG"), namesrv);
        try {
            String key = prefix + "-ord-0";
            SendResult r = p.send(new Message(topic, "TagO", key, ("body " + key).getBytes(StandardCharsets.UTF_8)));
            checkSent(key, r);
            String brokerName = r.getMessageQueue().getBrokerName();
            MQClientInstance factory = p.getDefaultMQProducerImpl().getMqClientFactory();
            MQClientAPIImpl api = factory.getMQClientAPIImpl();
            String addr = factory.findBrokerAddressInPublish(brokerName);
            MessageExt first = popOrderly(api, brokerName, addr, topic, group);
            System.out.println("orderpop 1 " + first.getKeys() + " " + first.getReconsumeTimes());
            ChangeInvisibleTimeRequestHeader change = new ChangeInvisibleTimeRequestHeader();
            change.setConsumerGroup(group);
            change.setTopic(topic);
            change.setQueueId(first.getQueueId());
            change.setExtraInfo(first.getProperty("POP_CK"));
            change.setOffset(first.getQueueOffset());
            change.setInvisibleTime(0L);
            CompletableFuture<AckResult> changed = new CompletableFuture<>();
            api.changeInvisibleTimeAsync(brokerName, addr, change, API_TIMEOUT_MS, acking(changed));
            changed.get(WAIT_S, TimeUnit.SECONDS);
            MessageExt second = popOrderly(api, brokerName, addr, topic, group);
            System.out.println("orderpop 2 " + second.getKeys() + " " + second.getReconsumeTimes());
            AckMessageRequestHeader ack = new AckMessageRequestHeader();
            ack.setConsumerGroup(group);
            ack.setTopic(topic);
            ack.setQueueId(second.getQueueId());
            ack.setExtraInfo(second.getProperty("POP_CK"));
            ack.setOffset(second.getQueueOffset());
            CompletableFuture<AckResult> acked = new CompletableFuture<>();
            api.ackMessageAsync(addr, API_TIMEOUT_MS, acking(acked), ack);
            System.out.println("orderpop-acked " + acked.get(WAIT_S, TimeUnit.SECONDS).getStatus());
            System.out.flush();
        } finally {
            p.shutdown();
        }
    }
}
