// The E2B smoke test of an older SDK generation: `e2b` 2.50.0 (package
// alias e2b-old), the last one that creates with POST /sandboxes and
// connects with POST /sandboxes/{id}/connect (protocol §2.4), against an
// Airlock server through E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL.
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK), after smoke.mjs.

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { createRequire } from 'node:module'

import { Sandbox } from 'e2b-old'

import { Runner, env, requestLog } from './lib.mjs'

env()
const r = new Runner('smoke-old')
const version = createRequire(import.meta.url)('e2b-old/package.json').version
assert.equal(version, '2.50.0', `e2b-old is ${version}; package.json pins 2.50.0`)
const tag = randomBytes(4).toString('hex')

let sbx
await r.step(`e2b ${version}: create (POST /sandboxes)`, async () => {
  const log = requestLog()
  sbx = r.track(await Sandbox.create({ timeoutMs: 300_000, requestTimeoutMs: 180_000, metadata: { purpose: 'smoke-old' }, logger: log.logger }))
  assert.equal(log.requests()[0], 'POST /sandboxes', `create used ${log.requests()}`)
  assert.equal(log.statuses()[0], 201, `create answered ${log.lines}`)
  console.log(`smoke-old: sandbox ${sbx.sandboxId}`)
})

await r.step('commands.run echo', async () => {
  const res = await sbx.commands.run('echo old')
  assert.equal(res.exitCode, 0, 'exit code')
  assert.equal(res.stdout, 'old\n', 'stdout')
})

await r.step('files write/read', async () => {
  const info = await sbx.files.write('/home/user/old.txt', `from e2b ${version} ${tag}`)
  assert.equal(info.path, '/home/user/old.txt', 'write path')
  assert.equal(await sbx.files.read('/home/user/old.txt'), `from e2b ${version} ${tag}`, 'read back')
})

await r.step('Sandbox.connect (POST /sandboxes/{id}/connect)', async () => {
  const log = requestLog()
  const again = await Sandbox.connect(sbx.sandboxId, { logger: log.logger })
  assert.equal(log.requests()[0], `POST /sandboxes/${sbx.sandboxId}/connect`, `connect used ${log.requests()}`)
  assert.equal(log.statuses()[0], 200, `connect of a running sandbox: ${log.lines}`)
  assert.equal((await again.commands.run('cat /home/user/old.txt')).stdout, `from e2b ${version} ${tag}`, 'read through the connected handle')
})

await r.step('kill → true, kill again → false', async () => {
  assert.equal(await sbx.kill(), true, 'first kill')
  assert.equal(await sbx.kill(), false, 'second kill')
})

r.done()
