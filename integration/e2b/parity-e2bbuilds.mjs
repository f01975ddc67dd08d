// E2B template builds as records of the server's store, and who may build,
// through the real, unchanged `e2b` SDK:
//
//   - a project key that is not an admin's (E2B_API_KEY: a member) is
//     refused with a BuildError carrying E2B's 403 and the reason (templates
//     are shared by every project: only admins make, tag or delete them),
//     and nothing is built;
//   - an admin's buildInBackground is followed with getBuildStatus by the
//     admin and by a member of the same project (the build's record is the
//     project's), while another project's key gets a 404 for it;
//   - the ended build still answers getBuildStatus (ready, its log), as a
//     record does; that it answers after a server restart is
//     TestE2BBuildSurvivesRestart's (a script cannot restart the server).
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK).

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { BuildError, Template } from 'e2b'

import { Runner, env, expectReject } from './lib.mjs'

env()
const admin = process.env.PARITY_ADMIN_API_KEY
const other = process.env.AIRLOCK_TEST_OTHER_E2B_KEY
if (!admin || !other) {
  console.error('parity-e2bbuilds: PARITY_ADMIN_API_KEY and AIRLOCK_TEST_OTHER_E2B_KEY must be set')
  process.exit(2)
}
const r = new Runner('parity-e2bbuilds')
const tag = randomBytes(4).toString('hex')
const name = `e2bbuilds-${tag}`
const adminOpts = { apiKey: admin, requestTimeoutMs: 120_000 }
const memberOpts = { apiKey: process.env.E2B_API_KEY, requestTimeoutMs: 60_000 }

await r.step('a member key may not build: BuildError 403 naming why; nothing built', async () => {
  const t = Template().fromTemplate('minimal').runCmd('true')
  const err = await expectReject(Template.build(t, `${name}:member`, memberOpts), BuildError, 'a member build')
  assert.match(String(err.message), /^403: .*admin API key.*shared by every project/)
  const tagErr = await expectReject(Template.assignTags('minimal', [`evil-${tag}`], memberOpts), Error, 'a member tags')
  assert.match(String(tagErr.message), /403: .*admin API key/)
  assert.equal(await Template.exists(`${name}:member`, adminOpts), false)
  assert.equal(await Template.exists(`minimal:evil-${tag}`, adminOpts), false)
}, 60_000)

await r.step('buildInBackground; getBuildStatus by the admin, a member of its project, not another project', async () => {
  const t = Template().fromTemplate('minimal').runCmd(`echo record ${tag}`)
  const info = await Template.buildInBackground(t, `${name}:bg`, adminOpts)
  const seen = []
  let offset = 0
  for (const deadline = Date.now() + 300_000; ;) {
    const s = await Template.getBuildStatus(info, { ...adminOpts, logsOffset: offset })
    offset += s.logEntries.length
    seen.push(...s.logEntries.map((e) => e.message))
    if (s.status === 'ready') break
    assert.notEqual(s.status, 'error', JSON.stringify(s.reason))
    assert.ok(Date.now() < deadline, 'the build did not finish')
    await new Promise((res) => setTimeout(res, 1000))
  }
  assert.ok(seen.some((l) => l.includes(`record ${tag}`)), `the log:\n${seen.join('\n')}`)
  const byMember = await Template.getBuildStatus(info, memberOpts)
  assert.equal(byMember.status, 'ready')
  assert.equal(byMember.buildID, info.buildId)
  const err = await expectReject(Template.getBuildStatus(info, { apiKey: other, requestTimeoutMs: 60_000 }), BuildError, "another project's status")
  assert.match(String(err.message), /^404: /)
  // Ended, the record still answers with the whole log.
  const again = await Template.getBuildStatus(info, adminOpts)
  assert.equal(again.status, 'ready')
  assert.ok(again.logEntries.some((e) => e.message.includes(`record ${tag}`)))
  await Template.removeTags(name, ['bg'], adminOpts)
}, 360_000)

r.done()
