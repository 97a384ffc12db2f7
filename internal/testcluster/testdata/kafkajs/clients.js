// kafkajs through logagent's Kafka listener (internal/testcluster
// TestKafkaJS runs it; `make kafkajs` installs kafkajs here with npm ci).
//
// Environment: BROKER (the listener), TOPIC, PARTITIONS, RECORDS, GROUP.
// It creates the topic with the admin client, writes RECORDS records
// round the partitions with an idempotent acks=-1 producer, reads them
// all in a group consumer, commits the next offset of every partition,
// and prints one JSON line per event on stdout for the test to check:
//   {"event":"created","created":bool}
//   {"event":"produced","partition":p,"offset":"o","value":"v"}
//   {"event":"consumed","partition":p,"offset":"o","value":"v"}
//   {"event":"committed","partition":p,"offset":"o"}   (as OffsetFetch answers)
//   {"event":"done"}
// kafkajs's own log goes to stderr.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const env = name => {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is not set`)
  return v
}
const broker = env('BROKER')
const topic = env('TOPIC')
const partitions = Number(env('PARTITIONS'))
const records = Number(env('RECORDS'))
const groupId = env('GROUP')

const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n')

const kafka = new Kafka({
  clientId: 'logagent-kafkajs-test',
  brokers: [broker],
  logLevel: logLevel.INFO,
  logCreator: () => ({ namespace, level, label, log }) => {
    process.stderr.write(`${label} [${namespace}] ${JSON.stringify(log)}\n`)
  },
})

async function main () {
  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({
    waitForLeaders: true,
    topics: [{ topic, numPartitions: partitions, replicationFactor: 3, configEntries: [{ name: 'min.insync.replicas', value: '2' }] }],
  })
  emit({ event: 'created', created })

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  // One send per partition's share, so that a batch holds many records
  // and every partition gets some.
  for (let p = 0; p < partitions; p++) {
    const messages = []
    for (let i = p; i < records; i += partitions) messages.push({ partition: p, value: `js-${i}` })
    const res = await producer.send({ topic, acks: -1, messages })
    for (const r of res) {
      // baseOffset of the batch: the records are at baseOffset + index.
      messages.forEach((m, k) => emit({ event: 'produced', partition: r.partition, offset: String(BigInt(r.baseOffset) + BigInt(k)), value: m.value }))
    }
  }
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  let consumed = 0
  const next = {}
  await new Promise((resolve, reject) => {
    consumer.on(consumer.events.CRASH, e => reject(e.payload.error))
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        emit({ event: 'consumed', partition, offset: message.offset, value: message.value.toString() })
        next[partition] = (BigInt(message.offset) + 1n).toString()
        if (++consumed === records) resolve()
      },
    }).catch(reject)
  })
  await consumer.commitOffsets(Object.entries(next).map(([partition, offset]) => ({ topic, partition: Number(partition), offset })))
  await consumer.disconnect()

  const fetched = await admin.fetchOffsets({ groupId, topics: [topic] })
  for (const t of fetched) {
    for (const p of t.partitions) emit({ event: 'committed', partition: p.partition, offset: p.offset })
  }
  await admin.disconnect()
  emit({ event: 'done' })
}

main().then(() => process.exit(0), err => {
  process.stderr.write(`kafkajs test failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
