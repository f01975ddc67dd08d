// Control-plane parity with the real `e2b` SDK (2.51.0, pinned in
// package.json), against an Airlock server on runsc (TestE2BSDK):
//
//   - getMetrics: samples of CPU, memory and disk (every 5 s on the node)
//     for a sandbox, in a time range, none before it existed;
//   - deadlines fire on a timer: several sandboxes with a short timeout
//     are gone (killed) or paused one second after their deadline, which
//     the former 5 s poll of the reaper missed most of the time;
//   - pause({ keepMemory: false }) on runsc is a filesystem-only suspend:
//     after connect (the wake) a file written before is there and a
//     background process started before is gone (a fresh sandbox over the
//     kept files), where a plain pause keeps it;
//   - lifecycle onTimeout pause with keepMemory false is still refused
//     with a clear 501 on runsc (the deadline's suspend would keep
//     memory), instead of being silently ignored; nothing is created.
//
// By hand: E2B_API_KEY=… E2B_API_URL=… E2B_SANDBOX_URL=… node parity-control.mjs

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { Sandbox, SandboxNotFoundError } from 'e2b'

import { Runner, env, waitFor } from './lib.mjs'

env()
const r = new Runner('parity-control')
const tag = randomBytes(4).toString('hex')
const opts = { timeoutMs: 300_000, requestTimeoutMs: 180_000, metadata: { purpose: 'parity-control', run: tag } }
const sleep = (ms) => new Promise((res) => setTimeout(res, ms))

let sbx
await r.step('create', async () => {
  sbx = r.track(await Sandbox.create(opts))
})

const started = new Date()
await r.step('getMetrics: a sample within 30 s, every field set', async () => {
  await sbx.files.write('metrics.bin', 'x'.repeat(8 << 20)) // 8 MiB on its disk, in the user's home
  const metrics = await waitFor('a metric', async () => {
    const m = await sbx.getMetrics()
    return m.length > 0 && m
  }, { timeoutMs: 30_000, intervalMs: 500 })
  const m = metrics[metrics.length - 1]
  for (const f of ['cpuCount', 'cpuUsedPct', 'memUsed', 'memTotal', 'memCache', 'diskUsed', 'diskTotal']) {
    assert.equal(typeof m[f], 'number', `${f} is ${typeof m[f]}: ${JSON.stringify(m)}`)
  }
  assert.ok(m.timestamp instanceof Date && !Number.isNaN(m.timestamp.getTime()), `timestamp ${m.timestamp}`)
  assert.ok(m.cpuCount >= 1, `cpuCount ${m.cpuCount}`)
  assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `cpuUsedPct ${m.cpuUsedPct}`)
  assert.ok(m.memTotal > 0 && m.memUsed > 0 && m.memUsed <= m.memTotal, `memory ${m.memUsed} of ${m.memTotal}`)
  assert.ok(m.diskTotal > 0 && m.diskUsed >= 8 << 20 && m.diskUsed <= m.diskTotal, `disk ${m.diskUsed} of ${m.diskTotal}`)
})

await r.step('Sandbox.getMetrics(id, {start, end}): in the range; none before the sandbox', async () => {
  // The SDK sends start and end as whole seconds (rounded): a sample
  // taken in the last half second could fall after an end of now. No sample
  // can be in the future, so an end 2 s ahead still bounds them all.
  const end = new Date(Date.now() + 2000)
  const inRange = await Sandbox.getMetrics(sbx.sandboxId, { start: started, end })
  assert.ok(inRange.length > 0, 'no metric in the range')
  for (const m of inRange) {
    // The SDK rounds start and end to seconds.
    assert.ok(m.timestamp.getTime() >= started.getTime() - 1000 && m.timestamp.getTime() <= end.getTime() + 1000,
      `${m.timestamp.toISOString()} outside [${started.toISOString()}, ${end.toISOString()}]`)
  }
  const before = await Sandbox.getMetrics(sbx.sandboxId, {
    start: new Date(started.getTime() - 60 * 60 * 1000), end: new Date(started.getTime() - 30 * 60 * 1000),
  })
  assert.deepEqual(before, [])
})

await r.step('pause({keepMemory: false}) on runsc: files kept, processes not', async () => {
  await sbx.files.write('/home/user/fs-kept.txt', 'kept across a filesystem pause\n')
  const bg = await sbx.commands.run('sleep 600', { background: true })
  assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid), 'the background process is not listed before the pause')
  await bg.disconnect() // its stream would end with the sandbox's processes
  await sbx.pause({ keepMemory: false })
  assert.equal((await sbx.getInfo()).state, 'paused')
  sbx = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
  assert.equal((await sbx.getInfo()).state, 'running')
  assert.equal(await sbx.files.read('/home/user/fs-kept.txt'), 'kept across a filesystem pause\n')
  const listed = await sbx.commands.list()
  assert.ok(!listed.some((p) => p.cmd === 'sleep 600' || (p.args ?? []).includes('600')), `a process survived the filesystem pause: ${JSON.stringify(listed)}`)
  const ps = await sbx.commands.run('ps -eo args')
  assert.ok(!/sleep 600/.test(ps.stdout), `sleep 600 still runs after the filesystem pause:\n${ps.stdout}`)
})

await r.step('create with onTimeout pause, keepMemory false, on runsc: 501, nothing created', async () => {
  const run = `${tag}-fsonly`
  let err
  try {
    r.track(await Sandbox.create({ ...opts, metadata: { purpose: 'parity-control', run }, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }))
  } catch (e) {
    err = e
  }
  assert.ok(err, 'the create resolved: the deadline would keep memory the caller said not to keep')
  assert.match(String(err), /501/)
  assert.match(String(err), /keepMemory: false is not supported/)
  const p = Sandbox.list({ query: { metadata: { run } } })
  assert.deepEqual(await p.nextItems(), [], 'a sandbox was created')
})

await r.step('kill', async () => {
  await sbx.kill()
})

await r.step('short timeouts fire on time: gone or paused 1 s after the deadline', async () => {
  // Three killed at their deadline, one paused; each checked one second
  // after its own deadline (endAt, the server's clock: this host's).
  const made = await Promise.all([
    ...[1, 2, 3].map(() => Sandbox.create({ ...opts, timeoutMs: 10_000 })),
    Sandbox.create({ ...opts, timeoutMs: 10_000, lifecycle: { onTimeout: 'pause' } }),
  ])
  made.forEach((s) => r.track(s))
  const checks = made.map(async (s, i) => {
    const endAt = (await s.getInfo()).endAt
    const wait = endAt.getTime() + 1000 - Date.now()
    assert.ok(wait > 0, `${s.sandboxId}: its deadline passed before the check could start (created too slowly)`)
    await sleep(wait)
    if (i < 3) {
      let err
      try {
        const info = await Sandbox.getInfo(s.sandboxId)
        err = new Error(`still ${info.state}`)
      } catch (e) {
        err = e
      }
      assert.ok(err instanceof SandboxNotFoundError, `${s.sandboxId} 1 s after its deadline (${endAt.toISOString()}): ${err}`)
    } else {
      const info = await Sandbox.getInfo(s.sandboxId)
      assert.equal(info.state, 'paused', `${s.sandboxId} 1 s after its deadline (${endAt.toISOString()})`)
      await s.kill()
    }
  })
  await Promise.all(checks)
})

r.done()
