// A Spring Boot application as its users write one, with rocketmq-spring-boot-starter 2.3.3
// (unchanged): RocketMQTemplate.syncSend and a @RocketMQMessageListener, started against a Gannet
// broker's name server, for tests/remoting/test_spring.py.
//
//   java -cp '<classes>:<lib>/*' io.gannet.e2e.SpringChecks --rocketmq.name-server=<host:port> \
//       --gannet.topic=<topic> --gannet.group=<group> --gannet.count=<n>
//
// Prints "sent <key> <queue> <offset>" per acknowledged send, "got <key>" per message the
// listener consumed, and "consumed <n>" once every key came back; exits 0 when every message
// came back and none twice so far, 1 otherwise (60 s at most).

package io.gannet.e2e;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.spring.annotation.RocketMQMessageListener;
import org.apache.rocketmq.spring.core.RocketMQListener;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.RocketMQHeaders;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.CommandLineRunner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.messaging.support.MessageBuilder;
import org.springframework.stereotype.Component;

@SpringBootApplication
public class SpringChecks {
    static final Map<String, AtomicInteger> RECEIVED = new ConcurrentHashMap<>();
    static volatile CountDownLatch remaining;

    @Component
    @RocketMQMessageListener(topic = "${gannet.topic}", consumerGroup = "${gannet.group}")
    public static class Listener implements RocketMQListener<MessageExt> {
        @Override
        public void onMessage(MessageExt message) {
            String key = message.getKeys();
            String body = new String(message.getBody(), StandardCharsets.UTF_8);
            if (!body.equals("body of " + key)) {
                System.out.println("bad body " + key + " " + body);
                return;
            }
            System.out.println("got " + key);
            if (RECEIVED.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet() == 1) {
                remaining.countDown();
            }
        }
    }

    @Bean
    CommandLineRunner checks(RocketMQTemplate template, @Value("${gannet.topic}") String topic,
        @Value("${gannet.count}") int count) {
        return args -> {
            boolean sentAll = true;
            for (int i = 0; i < count; i++) {
                String key = "spring-" + i;
                SendResult sent = template.syncSend(topic + ":TagA", MessageBuilder
                    .withPayload("body of " + key)
                    .setHeader(RocketMQHeaders.KEYS, key)
                    .build());
                sentAll &= sent.getSendStatus() == SendStatus.SEND_OK;
                System.out.println("sent " + key + " " + sent.getMessageQueue().getQueueId() + " "
                    + sent.getQueueOffset());
            }
            boolean all = remaining.await(60, TimeUnit.SECONDS);
            boolean once = RECEIVED.size() == count
                && RECEIVED.values().stream().allMatch(n -> n.get() == 1);
            System.out.println("consumed " + RECEIVED.size());
            System.exit(sentAll && all && once ? 0 : 1);
        };
    }

    public static void main(String[] args) {
        int count = 10;
        for (String arg : args) {
            if (arg.startsWith("--gannet.count=")) {
                count = Integer.parseInt(arg.substring("--gannet.count=".length()));
            }
        }
        remaining = new CountDownLatch(count);
        SpringApplication.run(SpringChecks.class, args);
    }
}
