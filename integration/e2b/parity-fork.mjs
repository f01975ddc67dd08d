// E2B snapshots and fork against Airlock (docs/e2b.md, "Snapshots and
// fork"): createSnapshot of a running sandbox with a process and a file,
// listSnapshots (all, for a sandbox, by ID), Sandbox.create(snapshotId)
// continuing the process (runsc keeps memory), fork of N sandboxes that
// continue it too, each independent of its source, deleteSnapshot (true,
// then false), a named snapshot found by its name, and the errors E2B's
// SDK tests expect.
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK, runsc) with the
// environment of smoke.mjs.

import assert from 'node:assert/strict'

import { Sandbox, SandboxNotFoundError } from 'e2b'

import { Runner, env, expectReject, waitFor } from './lib.mjs'

env()
const r = new Runner('parity-fork')
const createOpts = { timeoutMs: 300_000, requestTimeoutMs: 180_000 }
// counter is a loop whose count lives only in the shell's memory: it
// writes it every 100 ms. A copy whose processes started again (or did
// not start at all) cannot go on counting from where the source was.
const counter = 'i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done'
const count = async (sbx) => Number((await sbx.files.read('/tmp/counter')).trim())
let src, snap, fromSnap
let atSnapshot = 0

// continues checks that sbx's counter goes on from at least min.
async function continues(sbx, min, what) {
  const first = await waitFor(`${what}: counter`, async () => {
    const n = await count(sbx)
    return n >= min ? n : 0
  })
  await waitFor(`${what}: counter goes on from ${first}`, async () => (await count(sbx)) > first, { timeoutMs: 20_000 })
}

await r.step('a running sandbox with a process and a file', async () => {
  src = r.track(await Sandbox.create(createOpts))
  await src.files.write('/home/user/state.txt', 'state before the snapshot')
  await src.commands.run(`sh -c '${counter}'`, { background: true })
  atSnapshot = await waitFor('the counter reaches 20', async () => {
    const n = await count(src).catch(() => 0)
    return n >= 20 ? n : 0
  })
})

await r.step('createSnapshot', async () => {
  snap = await src.createSnapshot({ requestTimeoutMs: 180_000 })
  assert.match(snap.snapshotId, /^snp_[a-z2-7]{26}$/)
  assert.ok(Array.isArray(snap.names), `names: ${JSON.stringify(snap)}`)
  assert.ok(await src.isRunning(), 'the source runs on')
  await continues(src, atSnapshot, 'the source')
})

await r.step('listSnapshots: all, for the sandbox, by ID', async () => {
  const all = Sandbox.listSnapshots()
  assert.ok(all.hasNext)
  assert.ok((await all.nextItems()).some((s) => s.snapshotId === snap.snapshotId))
  const mine = await src.listSnapshots().nextItems()
  assert.deepEqual(mine.map((s) => s.snapshotId), [snap.snapshotId])
  const byID = await Sandbox.listSnapshots({ name: snap.snapshotId }).nextItems()
  assert.deepEqual(byID.map((s) => s.snapshotId), [snap.snapshotId])
  assert.deepEqual(await Sandbox.listSnapshots({ name: `${snap.snapshotId}-does-not-exist` }).nextItems(), [])
  assert.deepEqual(await Sandbox.listSnapshots({ sandboxId: 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa' }).nextItems(), [])
})

await r.step("another project's key finds neither the sandbox nor the snapshot", async () => {
  const apiKey = process.env.AIRLOCK_TEST_OTHER_E2B_KEY
  assert.ok(apiKey, 'AIRLOCK_TEST_OTHER_E2B_KEY is not set')
  const other = { apiKey, requestTimeoutMs: 60_000 }
  const listed = await Sandbox.listSnapshots(other).nextItems()
  assert.ok(!listed.some((s) => s.snapshotId === snap.snapshotId), `listed: ${JSON.stringify(listed)}`)
  assert.deepEqual(await Sandbox.listSnapshots({ ...other, name: snap.snapshotId }).nextItems(), [])
  await expectReject(Sandbox.createSnapshot(src.sandboxId, other), SandboxNotFoundError, "another project's createSnapshot")
  await expectReject(Sandbox.fork(src.sandboxId, other), SandboxNotFoundError, "another project's fork")
  await assert.rejects(Sandbox.create(snap.snapshotId, { ...other, timeoutMs: 60_000 }), /not found/i)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, other), false)
  // Still there for its own project.
  assert.ok((await Sandbox.listSnapshots({ name: snap.snapshotId }).nextItems()).length === 1)
})

await r.step('Sandbox.create(snapshotId): the file, and the process continues', async () => {
  fromSnap = r.track(await Sandbox.create(snap.snapshotId, createOpts))
  assert.notEqual(fromSnap.sandboxId, src.sandboxId)
  assert.equal(await fromSnap.files.read('/home/user/state.txt'), 'state before the snapshot')
  await continues(fromSnap, atSnapshot, 'the sandbox from the snapshot')
  // Independent of its source.
  await fromSnap.files.write('/home/user/state.txt', 'changed in the copy')
  assert.equal(await src.files.read('/home/user/state.txt'), 'state before the snapshot')
  assert.equal((await fromSnap.getInfo()).templateId, snap.snapshotId)
  await fromSnap.kill()
})

await r.step('fork 2: each continues the process, the source runs on', async () => {
  await src.files.write('/home/user/state.txt', 'state before the fork')
  const before = await count(src)
  const forks = await src.fork({ count: 2, timeoutMs: 120_000, requestTimeoutMs: 180_000 })
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(f instanceof Sandbox, `a fork failed: ${f}`)
    r.track(f)
  }
  const ids = new Set(forks.map((f) => f.sandboxId))
  assert.equal(ids.size, 2)
  assert.ok(!ids.has(src.sandboxId))
  assert.ok(await src.isRunning())
  for (const f of forks) {
    assert.ok(await f.isRunning())
    assert.equal(await f.files.read('/home/user/state.txt'), 'state before the fork')
    await continues(f, before, `fork ${f.sandboxId}`)
  }
  await forks[0].files.write('/home/user/state.txt', 'changed in a fork')
  assert.equal(await forks[1].files.read('/home/user/state.txt'), 'state before the fork')
  assert.equal(await src.files.read('/home/user/state.txt'), 'state before the fork')
  // E2B's timeout of a fork is its own.
  const info = await forks[1].getInfo()
  assert.ok(info.endAt.getTime() - Date.now() <= 121_000, `endAt ${info.endAt.toISOString()}`)
  await Promise.all(forks.map((f) => f.kill()))
})

await r.step('a named snapshot: names, listSnapshots by name', async () => {
  const name = `snap-${src.sandboxId.slice(-8)}`
  const named = await src.createSnapshot({ name, requestTimeoutMs: 180_000 })
  try {
    assert.match(named.snapshotId, /^snp_[a-z2-7]{26}$/)
    assert.ok(named.names.some((n) => n.includes(name)), `names: ${JSON.stringify(named)}`)
    const byName = await Sandbox.listSnapshots({ name }).nextItems()
    assert.deepEqual(byName.map((s) => s.snapshotId), [named.snapshotId])
    assert.deepEqual(await Sandbox.listSnapshots({ name: `${name}-does-not-exist` }).nextItems(), [])
    await assert.rejects(src.createSnapshot({ name: '../x' }), /name/)
  } finally {
    await Sandbox.deleteSnapshot(named.snapshotId)
  }
})

await r.step('deleteSnapshot: true, then false', async () => {
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
  const left = await Sandbox.listSnapshots({ name: snap.snapshotId }).nextItems()
  assert.deepEqual(left, [])
  await assert.rejects(Sandbox.create(snap.snapshotId, createOpts), /snapshot/)
})

await r.step('fork and createSnapshot of a killed sandbox: not found', async () => {
  await src.kill()
  await expectReject(src.fork(), SandboxNotFoundError, 'fork of a killed sandbox')
  await expectReject(src.createSnapshot(), SandboxNotFoundError, 'createSnapshot of a killed sandbox')
})

r.done()
