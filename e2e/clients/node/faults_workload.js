// The official RocketMQ 5 Node.js client as a workload of e2e/faults (e2e/faults/client_workload.py),
// as e2e/clients/java/FaultsWorkload.java is the Java one: a Producer sending to one topic (a
// message at a time, paced, key = body, a raised send retried twice with the same key, each
// retry a new operation) and a SimpleConsumer in its own group on that topic (receive 16, change
// the invisible time of some, ack each). Prints the history as the Python workload keeps it, one
// JSON object a line on stdout:
//   {"t_ns": <process.hrtime>, "process": ..., "type": invoke|ok|fail|info, "f": ..., "value": {...}}
// (process.hrtime is CLOCK_MONOTONIC on Linux, as Python's time.monotonic). "ready" comes first,
// once both clients are up. Standard input: a line "stop-sends" ends the sends; its end stops
// the consumer and exits. Usage (NODE_PATH names the installed node_modules):
//   node faults_workload.js <endpoint a:p> <topic> <group> <sender name> <consumer name>
//       <rate per s> <seed>
'use strict';
const readline = require('readline');
const { Producer, SimpleConsumer, FilterExpression } = require('rocketmq-client-nodejs');

const RETRIES = 2;
const REQUEST_TIMEOUT_MS = 3000;
const AWAIT_MS = 5000;
const INVISIBLE_MS = 10000;
const CHANGED_INVISIBLE_MS = 12000;
const CHANGE_SHARE = 0.2;
const RECEIVE_MAX = 16;

let sendsStopped = false;
let inputClosed = false;
let wake = () => {};

function emit(process_, type, f, value) {
  const t_ns = process.hrtime.bigint().toString();
  process.stdout.write(`{"t_ns":${t_ns},"process":${JSON.stringify(process_)},"type":"${type}",` +
    `"f":"${f}","value":${JSON.stringify(value)}}\n`);
}

function errorName(err) {
  const text = `${err && err.name ? err.name : 'Error'}: ${err && err.message ? err.message : err}`;
  return text.slice(0, 160);
}

// The stored copy a delivery is: topic flag, queue and queue offset of its receipt handle
// (docs/formats/pop.md), as e2e/faults/workload.py's stored_copy.
function storedCopy(receiptHandle) {
  const fields = String(receiptHandle).split(' ');
  return fields.length < 8 ? String(receiptHandle) : `${fields[4]}/${fields[6]}/${fields[7]}`;
}

// A seeded generator (mulberry32): the share of changed invisible times is drawn from the seed.
function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function pause(ms) {
  return new Promise(resolve => {
    const timer = setTimeout(resolve, ms);
    wake = () => { clearTimeout(timer); resolve(); };
  });
}

async function sendOnce(producer, topic, name, key) {
  emit(name, 'invoke', 'send', { key, group: '' });
  try {
    const receipt = await producer.send({ topic, keys: [ key ], body: Buffer.from(key) });
    emit(name, 'ok', 'send', { key, group: '', id: String(receipt.messageId),
      offset: Number(receipt.offset) });
    return true;
  } catch (err) { // unknown outcome: it may have been stored
    emit(name, 'info', 'send', { key, error: errorName(err) });
    return false;
  }
}

async function send(producer, topic, name, ratePerS) {
  const intervalMs = 1000 / ratePerS;
  let nextAt = performance.now();
  let number = 0;
  while (!sendsStopped) {
    number += 1;
    const key = `${name}-${number}`;
    for (let attempt = 0; attempt <= RETRIES; attempt++) {
      if (await sendOnce(producer, topic, name, key) || sendsStopped) {
        break;
      }
    }
    nextAt += intervalMs;
    await pause(Math.max(0, nextAt - performance.now()));
    nextAt = Math.max(nextAt, performance.now() - intervalMs);
  }
}

async function op(name, f, fields, call) {
  emit(name, 'invoke', f, fields);
  try {
    await call();
    emit(name, 'ok', f, fields);
  } catch (err) { // an ack whose answer was lost may have taken effect
    emit(name, 'info', f, { ...fields, error: errorName(err) });
  }
}

async function pop(consumer, name, random) {
  while (!inputClosed) {
    emit(name, 'invoke', 'receive', {});
    let messages;
    try {
      messages = await consumer.receive(RECEIVE_MAX, INVISIBLE_MS);
    } catch (err) {
      emit(name, 'fail', 'receive', { error: errorName(err) });
      await new Promise(resolve => setTimeout(resolve, 200));
      continue;
    }
    const got = messages.map(m => ({
      key: Buffer.from(m.body).toString(), id: String(m.messageId),
      copy: storedCopy(m.receiptHandle),
    }));
    emit(name, 'ok', 'receive', { messages: got.map((g, i) => ({ ...g,
      attempt: Number(messages[i].deliveryAttempt || 0) })) });
    for (let i = 0; i < messages.length; i++) {
      const fields = got[i];
      if (random() < CHANGE_SHARE) {
        await op(name, 'change', fields,
          () => consumer.changeInvisibleDuration(messages[i], CHANGED_INVISIBLE_MS));
      }
      await op(name, 'ack', fields, () => consumer.ack(messages[i]));
    }
  }
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length !== 7) {
    process.stderr.write('usage: faults_workload.js <endpoint> <topic> <group> <sender> ' +
      '<consumer> <rate per s> <seed>\n');
    process.exit(2);
  }
  const [ endpoints, topic, group, sender, consumerName, rate, seed ] = args;
  const input = readline.createInterface({ input: process.stdin });
  input.on('line', line => {
    if (line.trim() === 'stop-sends') {
      sendsStopped = true;
      wake();
    }
  });
  input.on('close', () => { sendsStopped = true; inputClosed = true; wake(); });
  const producer = new Producer({ endpoints, requestTimeout: REQUEST_TIMEOUT_MS, topics: [ topic ] });
  const consumer = new SimpleConsumer({
    endpoints, requestTimeout: REQUEST_TIMEOUT_MS, consumerGroup: group, awaitDuration: AWAIT_MS,
    subscriptions: new Map().set(topic, FilterExpression.SUB_ALL),
  });
  await producer.startup();
  await consumer.startup();
  process.stdout.write('ready\n');
  const popping = pop(consumer, consumerName, seeded(Number(seed)));
  await send(producer, topic, sender, Number(rate));
  while (!inputClosed) {
    await pause(200);
  }
  await Promise.race([ popping, new Promise(resolve => setTimeout(resolve, 10000)) ]);
  await Promise.allSettled([ producer.shutdown(), consumer.shutdown() ]);
  process.exit(0);
}

main().catch(err => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
