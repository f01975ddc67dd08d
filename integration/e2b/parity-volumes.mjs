// E2B volumes against Airlock (docs/e2b.md, "Volumes"): Volume.create,
// getInfo, list and destroy on Airlock's volumes, Sandbox.create's
// volumeMounts (by Volume and by name), data that outlives the sandbox
// that wrote it, destroy refused while a sandbox mounts the volume (the
// volume content API: parity-volcontent.mjs).
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK) with the environment of
// smoke.mjs.

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { Sandbox, Volume, VolumeError, VolumeNotFoundError } from 'e2b'

import { Runner, env, expectReject } from './lib.mjs'

const cfg = env()
// The SDK sends volume content requests to E2B_VOLUME_API_URL (not
// E2B_API_URL): point them at Airlock too.
process.env.E2B_VOLUME_API_URL = cfg.E2B_API_URL
const r = new Runner('parity-volumes')
const name = `vol-${randomBytes(4).toString('hex')}`
const createOpts = { timeoutMs: 300_000, requestTimeoutMs: 180_000 }
let vol, first, second

await r.step('Volume.create', async () => {
  vol = await Volume.create(name)
  assert.match(vol.volumeId, /^vol_[a-z2-7]{26}$/)
  assert.equal(vol.name, name)
})

await r.step('Volume.getInfo and Volume.list', async () => {
  const info = await Volume.getInfo(vol.volumeId)
  assert.equal(info.volumeId, vol.volumeId)
  assert.equal(info.name, name)
  const list = await Volume.list()
  assert.ok(list.some((v) => v.volumeId === vol.volumeId && v.name === name), `list: ${JSON.stringify(list)}`)
  await expectReject(Volume.getInfo('vol_aaaaaaaaaaaaaaaaaaaaaaaaaa'), VolumeNotFoundError, 'getInfo of an unknown volume')
  await expectReject(Volume.create(name), VolumeError, 'a second volume of the same name')
})

await r.step('Sandbox.create with volumeMounts writes the volume', async () => {
  first = r.track(await Sandbox.create({ ...createOpts, volumeMounts: { '/data': vol } }))
  // As the SDK's default user (not root): the volume's root is writable.
  await first.files.write('/data/hello.txt', 'from the first sandbox')
  const res = await first.commands.run('id -u && stat -c %u /data/hello.txt && df -m /data | tail -1')
  const [uid, owner] = res.stdout.trim().split('\n')
  assert.equal(owner, uid, `the file belongs to the writer: ${res.stdout}`)
  const info = await first.getInfo()
  assert.deepEqual(info.volumeMounts, [{ name, path: '/data' }])
})

await r.step('Volume.destroy while mounted is refused', async () => {
  const err = await expectReject(Volume.destroy(vol.volumeId), VolumeError, 'destroy while mounted')
  assert.match(String(err.message), /volume_in_use|mount/)
})

await r.step('data outlives the sandbox: the next one reads it (mounted by name)', async () => {
  await first.kill()
  second = r.track(await Sandbox.create({ ...createOpts, volumeMounts: { '/home/user/vol': name } }))
  assert.equal(await second.files.read('/home/user/vol/hello.txt'), 'from the first sandbox')
})

await r.step('a mount over a system directory is refused', async () => {
  await assert.rejects(Sandbox.create({ ...createOpts, volumeMounts: { '/proc': vol } }), /proc/)
})

await r.step('Volume.destroy', async () => {
  await second.kill()
  // The delete completes asynchronously: the volume is freed once the
  // sandbox is deleted.
  const deadline = Date.now() + 60_000
  for (;;) {
    try {
      assert.equal(await Volume.destroy(vol.volumeId), true)
      break
    } catch (err) {
      if (Date.now() > deadline) throw err
      await new Promise((res) => setTimeout(res, 250))
    }
  }
  await expectReject(Volume.getInfo(vol.volumeId), VolumeNotFoundError, 'getInfo after destroy')
  assert.equal(await Volume.destroy(vol.volumeId), false)
})

r.done()
