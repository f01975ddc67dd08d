// E2B's volume content API against Airlock (docs/e2b.md, "Volumes"):
// the volume token, Volume.writeFile / readFile / list / makeDir /
// getInfo / exists / updateMetadata / remove without a sandbox, what the
// content API writes read in a sandbox that mounts the volume and the
// reverse, and wrong tokens refused.
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK) with the environment of
// smoke.mjs.

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { Sandbox, Volume, VolumePathNotFoundError } from 'e2b'

import { Runner, env, expectReject, waitFor } from './lib.mjs'

const cfg = env()
// The SDK sends volume content requests to E2B_VOLUME_API_URL (not
// E2B_API_URL): point them at Airlock too.
process.env.E2B_VOLUME_API_URL = cfg.E2B_API_URL
const r = new Runner('parity-volcontent')
const suffix = randomBytes(4).toString('hex')
const createOpts = { timeoutMs: 300_000, requestTimeoutMs: 180_000 }
let vol, other, sbx

await r.step('Volume.create gives a content token; connect gives the same', async () => {
  vol = await Volume.create(`vc-${suffix}`)
  other = await Volume.create(`vc-other-${suffix}`)
  assert.match(vol.token, /^alv_/)
  assert.notEqual(vol.token, other.token)
  const again = await Volume.connect(vol.volumeId)
  assert.equal(again.token, vol.token)
})

await r.step('writeFile, readFile, getInfo, list, makeDir without a sandbox', async () => {
  const w = await vol.writeFile('/from-api/hello.txt', 'written through the content API')
  assert.equal(w.type, 'file')
  assert.equal(w.size, 31)
  assert.equal(w.name, 'hello.txt')
  assert.ok(w.mtime instanceof Date && !Number.isNaN(w.mtime.getTime()))
  assert.equal(await vol.readFile('/from-api/hello.txt'), 'written through the content API')
  const bytes = await vol.readFile('/from-api/hello.txt', { format: 'bytes' })
  assert.equal(bytes.length, 31)
  const info = await vol.getInfo('/from-api')
  assert.equal(info.type, 'directory')
  assert.equal(await vol.exists('/from-api/hello.txt'), true)
  assert.equal(await vol.exists('/nothing-here'), false)
  const d = await vol.makeDir('/made/deep', { force: true })
  assert.equal(d.type, 'directory')
  const list = await vol.list('/', { depth: 2 })
  const paths = list.map((e) => e.path).sort()
  for (const p of ['/from-api', '/from-api/hello.txt', '/made', '/made/deep']) {
    assert.ok(paths.includes(p), `list lacks ${p}: ${paths}`)
  }
  const m = await vol.updateMetadata('/from-api/hello.txt', { mode: 0o640 })
  assert.equal(m.mode, 0o640)
  await expectReject(vol.readFile('/no/such/file'), VolumePathNotFoundError, 'read of a missing file')
})

await r.step('a sandbox that mounts the volume reads it, and its writes are read back', async () => {
  // Files the API wrote are root's: readable, so world-readable ones.
  await vol.updateMetadata('/from-api/hello.txt', { mode: 0o644 })
  sbx = r.track(await Sandbox.create({ ...createOpts, volumeMounts: { '/data': vol } }))
  assert.equal(await sbx.files.read('/data/from-api/hello.txt'), 'written through the content API')
  await sbx.files.write('/data/from-sandbox.txt', 'written in the sandbox')
  assert.equal(await vol.readFile('/from-sandbox.txt'), 'written in the sandbox')
  // Concurrent with the mount: a write now is seen at once inside.
  await vol.writeFile('/from-api/later.txt', 'later')
  const res = await sbx.commands.run('cat /data/from-api/later.txt')
  assert.equal(res.stdout, 'later')
})

await r.step('wrong tokens are refused', async () => {
  const forged = new Volume(vol.volumeId, vol.name, vol.token.slice(0, -4) + 'AAAA')
  await assert.rejects(forged.readFile('/from-sandbox.txt'), /401|invalid|unauthenticated|token/i)
  const swapped = new Volume(vol.volumeId, vol.name, other.token)
  await assert.rejects(swapped.list('/'), /403|token_scope|own volume/i)
  const none = new Volume(vol.volumeId, vol.name, '')
  await assert.rejects(none.list('/'))
})

await r.step('paths stay in the volume', async () => {
  await assert.rejects(vol.readFile('/../etc/passwd'), /400|path/i)
  await sbx.commands.run('ln -s /etc /data/etc-link && ln -s ../../../../etc /data/up-link')
  await assert.rejects(vol.readFile('/etc-link/passwd'))
  await assert.rejects(vol.readFile('/up-link/passwd'))
})

await r.step('remove', async () => {
  await vol.remove('/made')
  assert.equal(await vol.exists('/made/deep'), false)
})

await r.step('Volume.destroy', async () => {
  await sbx.kill()
  // Refused (volume_in_use) until the sandbox's delete completes.
  await waitFor('destroy once the sandbox is deleted', () => Volume.destroy(vol.volumeId), { timeoutMs: 60_000, intervalMs: 250 })
  assert.equal(await Volume.destroy(other.volumeId), true)
})

r.done()
