// The official RocketMQ 5 Node.js client as e2e/replication/failover.py drives it: one Producer
// on the endpoint given, never restarted, sending one message at a time, each with a unique key
// and its key as body. Prints one line per send on stdout:
//   ack <key> <message id> <queue offset> <started ns> <answered ns>
//   fail <key> <error name>
// (times from process.hrtime, CLOCK_MONOTONIC on Linux, as Python's time.monotonic_ns).
// Stops when its standard input closes. Usage (NODE_PATH names the installed node_modules):
//   node failover_producer.js <endpoint a:p> <topic> <key prefix>
'use strict';
const { Producer } = require('rocketmq-client-nodejs');

async function main() {
  const [ endpoints, topic, prefix ] = process.argv.slice(2);
  let done = false;
  process.stdin.on('end', () => { done = true; });
  process.stdin.on('close', () => { done = true; });
  process.stdin.resume();
  const producer = new Producer({ endpoints, requestTimeout: 3000, topics: [ topic ] });
  await producer.startup();
  process.stdout.write('ready\n');
  let number = 0;
  while (!done) {
    number += 1;
    const key = `${prefix}${number}`;
    const started = process.hrtime.bigint();
    try {
      const receipt = await producer.send({ topic, keys: [ key ], body: Buffer.from(key) });
      const answered = process.hrtime.bigint();
      process.stdout.write(`ack ${key} ${receipt.messageId} ${receipt.offset} ${started} ${answered}\n`);
    } catch (err) {
      process.stdout.write(`fail ${key} ${err && err.name ? err.name : 'Error'}\n`);
    }
  }
  await producer.shutdown();
  process.exit(0);
}

main().catch(err => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
