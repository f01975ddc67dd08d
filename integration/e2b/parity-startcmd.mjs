// Template start and ready commands through the real, unchanged `e2b` SDK:
// Template().setStartCmd(cmd, waitForFile(...)) and setStartCmd(cmd,
// waitForProcess(...)) → Template.build (the build checks them: the start
// command's output and "ready" are in its log) → Sandbox.create(that
// template): the start command ran before the create returned and still
// runs (commands.list shows it).
//
// Builds need an admin key (as Airlock's own builds do): PARITY_ADMIN_API_KEY.
// Run by integration/e2b_sdk_test.go (TestE2BSDK).

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { Sandbox, Template, waitForFile, waitForProcess } from 'e2b'

import { Runner, adminKey, buildLogged, env } from './lib.mjs'

env()
const admin = adminKey('parity-startcmd')
const r = new Runner('parity-startcmd')
const tag = randomBytes(4).toString('hex')
const name = `startcmd-${tag}`
const buildOpts = { apiKey: admin, requestTimeoutMs: 120_000 }
const createOpts = { timeoutMs: 300_000, requestTimeoutMs: 180_000 }

const ctxDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parity-startcmd-'))
process.on('exit', () => fs.rmSync(ctxDir, { recursive: true, force: true }))
// The SDK runs commands with /bin/bash, and waitForProcess runs pgrep:
// busybox's `minimal` has neither (the default template has both).
fs.writeFileSync(path.join(ctxDir, 'bash'), '#!/bin/sh\nexec /bin/sh "$@"\n', { mode: 0o755 })
fs.writeFileSync(path.join(ctxDir, 'pgrep'), '#!/bin/sh\nps -o comm | grep -qx -- "$1"\n', { mode: 0o755 })

const logs = []
const build = (t, tname) => buildLogged(Template, t, tname, buildOpts, logs)

// The start command takes a moment before it writes its file: a create
// that did not wait for the ready command would not find it.
const startCmd = `echo start-output-${tag}; sleep 1; echo started ${tag} > /tmp/started; exec sleep 100000`

await r.step('Template.build with setStartCmd(cmd, waitForFile): checked in the build', async () => {
  const t = Template({ fileContextPath: ctxDir })
    .fromTemplate('minimal')
    .copy('bash', '/bin/')
    .copy('pgrep', '/usr/local/bin/')
    .setWorkdir('/srv')
    .setStartCmd(startCmd, waitForFile('/tmp/started'))
  await build(t, `${name}:file`)
  const text = logs.join('\n')
  assert.ok(text.includes(`start-output-${tag}`), `the start command's output is in the build log:\n${text}`)
  assert.ok(text.includes('the template is ready'), `the build waited for the ready command:\n${text}`)
}, 300_000)

const expectStarted = async (sbx) => {
  assert.equal((await sbx.commands.run('cat /tmp/started')).stdout, `started ${tag}\n`, 'the start command ran before the create returned')
  const procs = await sbx.commands.list()
  const start = procs.filter((p) => [p.cmd, ...(p.args || [])].join(' ').includes('sleep 100000'))
  assert.equal(start.length, 1, `the start command runs, once: ${JSON.stringify(procs)}`)
  assert.equal((await sbx.commands.run('pwd', { cwd: '/srv' })).stdout, '/srv\n')
}

await r.step('Sandbox.create(the template): the start command runs at the first command', async () => {
  const t0 = Date.now()
  const sbx = r.track(await Sandbox.create(`${name}:file`, createOpts))
  try {
    assert.ok(Date.now() - t0 >= 1000, 'the create waited for the ready command')
    await expectStarted(sbx)
  } finally {
    await sbx.kill()
  }
}, 300_000)

await r.step('setStartCmd(cmd, waitForProcess).setReadyCmd(cmd) → build → create', async () => {
  const t = Template({ fileContextPath: ctxDir })
    .fromTemplate(`${name}:file`)
    .setStartCmd(startCmd, waitForProcess('sleep'))
    .setReadyCmd('[ -f /tmp/started ] && pgrep sleep > /dev/null')
  await build(t, `${name}:process`)
  const sbx = r.track(await Sandbox.create(`${name}:process`, createOpts))
  try {
    await expectStarted(sbx)
  } finally {
    await sbx.kill()
  }
}, 300_000)

r.done()
