// Templates as code through the real, unchanged `e2b` SDK: Template() with
// fromTemplate, copy (files uploaded through the server's own
// upload links), runCmd, makeSymlink, makeDir, setEnvs, setWorkdir,
// setUser; Template.build (logs followed), buildInBackground and
// getBuildStatus, exists, assignTags/getTags/removeTags; a failing step
// fails with a BuildError (fromImage of a registry: parity-registry.mjs); then
// Sandbox.create(thatTemplate) sees what the steps made.
//
// PARITY_TEMPLATES_BASE=0 leaves out the one build on `base` (for a server
// started by hand with --default-template minimal).
//
// Builds need an admin key (as Airlock's own builds do): the test passes one
// in PARITY_ADMIN_API_KEY beside the member key of E2B_API_KEY, which
// creates the sandboxes.
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK).

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { BuildError, Sandbox, Template } from 'e2b'

import { Runner, env, expectReject } from './lib.mjs'

env()
const admin = process.env.PARITY_ADMIN_API_KEY
if (!admin) {
  console.error('parity-templates: PARITY_ADMIN_API_KEY is not set')
  process.exit(2)
}
const r = new Runner('parity-templates')
const tag = randomBytes(4).toString('hex')
const name = `tpl-${tag}`
const buildOpts = { apiKey: admin, requestTimeoutMs: 120_000 }
const createOpts = { timeoutMs: 300_000, requestTimeoutMs: 180_000 }

const ctxDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parity-templates-'))
process.on('exit', () => fs.rmSync(ctxDir, { recursive: true, force: true }))
fs.mkdirSync(path.join(ctxDir, 'folder'))
fs.writeFileSync(path.join(ctxDir, 'folder', 'test.txt'), 'This is a test file.')
fs.symlinkSync('test.txt', path.join(ctxDir, 'folder', 'symlink.txt'))
fs.writeFileSync(path.join(ctxDir, 'run.sh'), '#!/bin/sh\necho from run.sh\n', { mode: 0o755 })
// The SDK runs commands with /bin/bash, which busybox's `minimal` lacks.
fs.writeFileSync(path.join(ctxDir, 'bash'), '#!/bin/sh\nexec /bin/sh "$@"\n', { mode: 0o755 })

await r.step('exists: base yes, an unknown name no', async () => {
  assert.equal(await Template.exists('base', buildOpts), true)
  assert.equal(await Template.exists(`nonexistent-${tag}`, buildOpts), false)
})

// Most builds start from the busybox template `minimal` (2 MB): every step
// of a build is a template of its own, and the Debian `base` is 450 MB a
// copy. One build on `base` shows E2B's user and home.
const logs = []
const build = async (t, tname, what) => {
  logs.length = 0
  try {
    return await Template.build(t, tname, { ...buildOpts, onBuildLogs: (e) => logs.push(e.message) })
  } catch (err) {
    console.error(`parity-templates: the log of ${what}:\n${logs.join('\n')}`)
    throw err
  }
}

await r.step('Template.build: copy, runCmd, makeSymlink, makeDir, setEnvs, setWorkdir, setUser', async () => {
  const t = Template({ fileContextPath: ctxDir })
    .fromTemplate('minimal')
    .copy('folder/*', 'folder')
    .copy('run.sh', '/usr/local/bin/run.sh')
    .copy('bash', '/bin/')
    // The run's tag: this and later steps are built anew each run (the
    // build cache would serve them otherwise).
    .runCmd(`cat folder/test.txt && echo run ${tag} && chown 1000:1000 folder/test.txt && /usr/local/bin/run.sh > ran.txt`)
    .makeSymlink('folder/test.txt', 'link.txt')
    .makeDir('/opt/made', { mode: 0o750 })
    .setEnvs({ GREETING: 'hello from an env step' })
    .setWorkdir('/app')
    .runCmd('echo "$GREETING" > greeting.txt')
    .setUser('root')
  const info = await build(t, `${name}:v1`, 'the main build')
  assert.equal(info.templateId, name)
  assert.ok(logs.some((l) => l.includes('This is a test file.')), `the run step's output is in the build log:\n${logs.join('\n')}`)
  assert.ok(logs.some((l) => l.includes('build sandbox sbx_')), 'run steps ran in build sandboxes')
  assert.equal(await Template.exists(name, buildOpts), false, 'no "latest" tag was made') // built as v1 only
}, 600_000)

await r.step('Sandbox.create(the built template) sees what the steps made', async () => {
  const sbx = r.track(await Sandbox.create(`${name}:v1`, createOpts))
  try {
    const read = async (cmd) => (await sbx.commands.run(cmd)).stdout.trim()
    assert.equal(await read('cat /folder/test.txt'), 'This is a test file.')
    assert.equal(await read('readlink /folder/symlink.txt'), 'test.txt')
    assert.equal(await read('stat -c %u:%g /folder/test.txt'), '1000:1000', 'chown as root in the build sandbox')
    assert.equal(await read('readlink /link.txt'), 'folder/test.txt')
    assert.equal(await read('cat /ran.txt'), 'from run.sh')
    assert.equal(await read('stat -c %a /opt/made'), '750')
    assert.equal(await read('cat /app/greeting.txt'), 'hello from an env step')
    assert.equal(await read('echo "$GREETING"'), 'hello from an env step')
  } finally {
    await sbx.kill()
  }
}, 300_000)

// PARITY_TEMPLATES_BASE=0: the server's default is `minimal` (no E2B user);
// only for a run by hand on a small disk (TestE2BSDK's default is Debian).
const onBase = process.env.PARITY_TEMPLATES_BASE !== '0'
if (onBase) await r.step('on base: steps run as E2B\'s user in its home', async () => {
  const t = Template().fromTemplate('base')
    .runCmd('test "$(whoami)" = user && test "$(pwd)" = /home/user && echo made by user > made.txt')
  await build(t, `${name}:base`, 'the build on base')
  const sbx = r.track(await Sandbox.create(`${name}:base`, createOpts))
  try {
    const out = (await sbx.commands.run('stat -c %U /home/user/made.txt; cat /home/user/made.txt')).stdout
    assert.equal(out, 'user\nmade by user\n')
  } finally {
    await sbx.kill()
  }
}, 600_000)

await r.step('a failing step fails the build with a BuildError', async () => {
  const t = Template().fromBaseImage().runCmd('echo about to fail; exit 3')
  const err = await expectReject(Template.build(t, `${name}-bad`, buildOpts), BuildError, 'a failing build')
  assert.match(String(err.message), /status 3/)
}, 300_000)

await r.step('buildInBackground, then getBuildStatus until ready', async () => {
  const t = Template().fromTemplate('minimal').runCmd(`sleep 2; echo background ${tag}`)
  const info = await Template.buildInBackground(t, `${name}:bg`, buildOpts)
  const first = await Template.getBuildStatus(info, buildOpts)
  assert.ok(['waiting', 'building', 'ready'].includes(first.status), `status ${first.status}`)
  let offset = 0
  const seen = []
  for (const deadline = Date.now() + 300_000; ;) {
    const s = await Template.getBuildStatus(info, { ...buildOpts, logsOffset: offset })
    offset += s.logEntries.length
    seen.push(...s.logEntries.map((e) => e.message))
    if (s.status === 'ready') break
    assert.notEqual(s.status, 'error', JSON.stringify(s.reason))
    assert.ok(Date.now() < deadline, 'the background build did not finish')
    await new Promise((res) => setTimeout(res, 1000))
  }
  assert.ok(seen.some((l) => l.includes('background')), `the log, read in pieces:\n${seen.join('\n')}`)
}, 360_000)

await r.step('assignTags, getTags, removeTags', async () => {
  const assigned = await Template.assignTags(`${name}:v1`, ['prod', 'stable'], buildOpts)
  assert.deepEqual(assigned.tags, ['prod', 'stable'])
  const tags = (await Template.getTags(name, buildOpts)).map((t) => t.tag).sort()
  const built = onBase ? ['base', 'bg', 'v1'] : ['bg', 'v1']
  assert.deepEqual(tags, [...built, 'prod', 'stable'].sort())
  await Template.removeTags(name, ['prod', 'stable', ...built], buildOpts)
  assert.equal(await Template.exists(`${name}:v1`, buildOpts), false)
}, 60_000)

r.done()
