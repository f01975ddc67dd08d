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
//   - lifecycle onTimeout {action: 'pause', keepMemory: false} on runsc:
//     the deadline's pause keeps only the filesystem (it used to be refused
//     with 501): after connect a file written before is there, a background
//     process started before is gone and the sandbox booted again (a new
//     boot_id), where the plain deadline pause below keeps memory.
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

await r.step('create with onTimeout pause, keepMemory false, on runsc: the deadline pauses keeping files, not processes', async () => {
  const fs = r.track(await Sandbox.create({ ...opts, timeoutMs: 8_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }))
  await fs.files.write('/home/user/deadline-kept.txt', 'kept across the deadline pause\n')
  const bootBefore = (await fs.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()
  const bg = await fs.commands.run('sleep 603', { background: true })
  await bg.disconnect()
  assert.equal((await fs.getInfo()).state, 'running', 'paused before its deadline: the test was too slow')
  await waitFor('the deadline pause', async () => (await fs.getInfo()).state === 'paused', { timeoutMs: 60_000, intervalMs: 250 })
  const woken = await Sandbox.connect(fs.sandboxId, { timeoutMs: 300_000 })
  assert.equal((await woken.getInfo()).state, 'running')
  assert.equal(await woken.files.read('/home/user/deadline-kept.txt'), 'kept across the deadline pause\n')
  const ps = await woken.commands.run('ps -eo args')
  assert.ok(!/sleep 603/.test(ps.stdout), `sleep 603 still runs after the filesystem-only deadline pause:\n${ps.stdout}`)
  const bootAfter = (await woken.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()
  assert.notEqual(bootAfter, bootBefore, 'the same boot after a filesystem-only pause')
  await woken.kill()
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
    if (i === 3) {
      // The plain deadline pause keeps memory: this process goes on.
      await (await s.commands.run('sleep 604', { background: true })).disconnect()
    }
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
      const woken = await Sandbox.connect(s.sandboxId, { timeoutMs: 300_000 })
      const ps = await woken.commands.run('ps -eo args')
      assert.ok(/sleep 604/.test(ps.stdout), `sleep 604 is gone after a plain deadline pause (memory kept):\n${ps.stdout}`)
      await woken.kill()
    }
  })
  await Promise.all(checks)
})

r.done()
