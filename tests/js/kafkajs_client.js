// kafkajs against `floe standalone`, driven by tests/test_kafka_clients.py.
//
//   node kafkajs_client.js produce BOOTSTRAP TOPIC COUNT
//     creates TOPIC (1 partition) with the admin client, sends COUNT keyed
//     messages with acks -1 in chunks of 100, then prints one JSON line:
//     {"chunks": [[partition, baseOffset, errorCode], ...], "offsets": admin.fetchTopicOffsets(TOPIC)}
//
//   node kafkajs_client.js consume BOOTSTRAP TOPIC COUNT SECONDS
//     a kafkajs consumer (kafkajs only consumes through a consumer group) reads
//     COUNT messages from the beginning and prints
//     {"messages": [[partition, offset, key, value, idxHeader], ...]}; exits 2 when
//     COUNT messages were not read within SECONDS.
//
//   node kafkajs_client.js group BOOTSTRAP TOPIC COUNT SECONDS GROUP
//     like consume, but in consumer group GROUP with autoCommit: the group's
//     committed offsets are used when it has some (from the beginning when not);
//     each message's offset is committed once processed, and pending commits are
//     sent at disconnect. Prints {"messages": [...]} with every message handed
//     to the consumer before the disconnect (possibly more than COUNT).
//
// With KAFKAJS_SECURITY set to JSON {"ca": PEM, "sasl": {"mechanism", "username",
// "password"}} the client connects with TLS (trusting CA) and SASL
// (tests/test_security.py); either part may be left out.
//
// Logs go to stderr so that stdout stays one JSON line.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const [mode, bootstrap, topic, countArg, secondsArg, groupArg] = process.argv.slice(2);
const count = Number(countArg);
if (!['produce', 'consume', 'group'].includes(mode) || !bootstrap || !topic || !(count >= 0)
    || (mode === 'group' && !groupArg)) {
  process.stderr.write('usage: kafkajs_client.js produce|consume BOOTSTRAP TOPIC COUNT [SECONDS]\n'
    + '       kafkajs_client.js group BOOTSTRAP TOPIC COUNT SECONDS GROUP\n');
  process.exit(64);
}

const stderrLog = () => ({ namespace, level, label, log }) => {
  process.stderr.write(`${label} [${namespace}] ${JSON.stringify(log)}\n`);
};

function security() {
  if (!process.env.KAFKAJS_SECURITY) return {};
  const s = JSON.parse(process.env.KAFKAJS_SECURITY);
  const out = {};
  if (s.ca) out.ssl = { ca: [s.ca] };
  if (s.sasl) out.sasl = s.sasl;
  return out;
}

const kafka = new Kafka({
  ...security(),
  clientId: 'floe-kafkajs-test',
  brokers: [bootstrap],
  logLevel: logLevel.WARN,
  logCreator: stderrLog,
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 2000 },
});

async function produce() {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    topics: [{ topic, numPartitions: 1, replicationFactor: 1 }],
    waitForLeaders: true,
  });
  const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: false });
  await producer.connect();
  const chunks = [];
  for (let start = 0; start < count; start += 100) {
    const messages = [];
    for (let i = start; i < Math.min(count, start + 100); i++) {
      messages.push({ key: `key-${i % 13}`, value: `kafkajs-value-${i}`, headers: { idx: String(i) } });
    }
    const meta = await producer.send({ topic, acks: -1, messages });
    for (const m of meta) chunks.push([m.partition, Number(m.baseOffset), m.errorCode]);
  }
  await producer.disconnect();
  const offsets = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  process.stdout.write(JSON.stringify({ chunks, offsets }) + '\n');
}

async function consume(groupId) {
  const seconds = Number(secondsArg || 20);
  const autoCommit = groupId !== undefined;
  const consumer = kafka.consumer({
    groupId: autoCommit ? groupId : `floe-kafkajs-${topic}`, sessionTimeout: 10000, heartbeatInterval: 1000,
  });
  const messages = [];
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const timer = setTimeout(() => finish(false), seconds * 1000);
  try {
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      autoCommit,
      eachMessage: async ({ partition, message }) => {
        const idx = message.headers && message.headers.idx ? message.headers.idx.toString() : null;
        messages.push([partition, Number(message.offset), message.key && message.key.toString(),
          message.value && message.value.toString(), idx]);
        if (messages.length >= count) finish(true);
      },
    });
    const ok = await finished;
    if (autoCommit) await consumer.disconnect(); // commits what was processed; fails the run if it fails
    process.stdout.write(JSON.stringify({ messages }) + '\n');
    return ok;
  } finally {
    clearTimeout(timer);
    await consumer.disconnect().catch(() => {});
  }
}

(async () => {
  const hardStop = setTimeout(() => {
    process.stderr.write('kafkajs_client: hard deadline reached\n');
    process.exit(3);
  }, (Number(secondsArg || 0) + 90) * 1000);
  hardStop.unref();
  if (mode === 'produce') {
    await produce();
    process.exit(0);
  }
  const ok = await consume(mode === 'group' ? groupArg : undefined);
  process.exit(ok ? 0 : 2);
})().catch((e) => {
  process.stderr.write(`kafkajs_client: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
