// Templates as code from a registry image through the real, unchanged `e2b`
// SDK: Template().fromImage(a registry's image) builds on the pulled image,
// the built template runs, fromImageRegistry credentials reach a registry
// that wants them (wrong ones fail), an image the registry lacks fails the
// build with a BuildError naming it, and fromImageRegistry of type aws is
// refused.
//
// PARITY_REGISTRY_IMAGE names a public image (a busybox userland with
// /srv/greeting), PARITY_REGISTRY_PRIVATE the same behind basic auth
// (PARITY_REGISTRY_USER / PARITY_REGISTRY_PASSWORD): TestE2BSDK serves them
// from a registry in the fake internet. Builds take an admin key
// (PARITY_ADMIN_API_KEY), as in parity-templates.mjs.
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK).

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { BuildError, Sandbox, Template } from 'e2b'

import { Runner, env, expectReject } from './lib.mjs'

env()
const admin = process.env.PARITY_ADMIN_API_KEY
const image = process.env.PARITY_REGISTRY_IMAGE
const privateImage = process.env.PARITY_REGISTRY_PRIVATE
if (!admin || !image || !privateImage) {
  console.error('parity-registry: PARITY_ADMIN_API_KEY, PARITY_REGISTRY_IMAGE and PARITY_REGISTRY_PRIVATE must be set')
  process.exit(2)
}
const creds = { username: process.env.PARITY_REGISTRY_USER, password: process.env.PARITY_REGISTRY_PASSWORD }
const r = new Runner('parity-registry')
const name = `reg-${randomBytes(4).toString('hex')}`
const buildOpts = { apiKey: admin, requestTimeoutMs: 120_000 }
const steps = (t) => t.runCmd('cat /srv/greeting > /srv/copy', { user: 'root' })

await r.step('fromImage of a registry image builds, and the template runs', async () => {
  await Template.build(steps(Template().fromImage(image)), name, buildOpts)
  const sbx = r.track(await Sandbox.create(name, { timeoutMs: 120_000, requestTimeoutMs: 120_000 }))
  const res = await sbx.commands.run('cat /srv/copy', { user: 'root' })
  assert.equal(res.stdout, 'hello from the registry\n')
  await sbx.kill()
}, 300_000)

await r.step('fromImage with registry credentials: right ones build, wrong ones fail naming the image', async () => {
  await Template.build(steps(Template().fromImage(privateImage, creds)), `${name}-private`, buildOpts)
  const err = await expectReject(
    Template.build(steps(Template().fromImage(privateImage, { username: creds.username, password: 'wrong' })), `${name}-wrong`, buildOpts),
    BuildError, 'wrong credentials')
  assert.match(String(err.message), /could not be pulled/)
  assert.ok(String(err.message).includes(privateImage), err.message)
}, 300_000)

await r.step('an image the registry lacks fails the build naming it', async () => {
  const missing = image.replace(/:[^:/]+$/, ':no-such-tag')
  const err = await expectReject(Template.build(steps(Template().fromImage(missing)), `${name}-missing`, buildOpts), BuildError, 'missing image')
  assert.match(String(err.message), /could not be pulled/)
  assert.ok(String(err.message).includes(missing), err.message)
}, 120_000)

await r.step('fromImageRegistry of type aws is refused (501)', async () => {
  const t = Template().fromAWSRegistry('123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1',
    { accessKeyId: 'AKIA', secretAccessKey: 's', region: 'us-east-1' })
  const err = await expectReject(Template.build(t.runCmd('true'), `${name}-aws`, buildOpts), Error, 'aws registry')
  assert.match(String(err.message), /aws is not supported/)
}, 60_000)

await r.step('cleanup', async () => {
  await Template.removeTags(name, ['latest'], buildOpts)
  await Template.removeTags(`${name}-private`, ['latest'], buildOpts)
}, 60_000)

r.done()
