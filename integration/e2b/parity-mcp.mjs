// Parity: the `mcp` option of Sandbox.create. The SDK sends the MCP config in
// the create and then starts the gateway itself inside the new sandbox
// (`mcp-gateway --config …` as root, from the template); Airlock takes the
// config and the gateway is the template's. A template without
// mcp-gateway (the default one) makes the create fail with the SDK's own
// "Failed to start MCP gateway" error, and the SDK kills the sandbox: none
// is left. A config that is not an object is refused by the server (400).
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK) with the other scripts.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'

import { InvalidArgumentError, Sandbox, SandboxError } from 'e2b'

import { Runner, env, expectReject } from './lib.mjs'

env()
const r = new Runner('parity-mcp')
const metadata = { parityMcp: randomUUID() }
const leftovers = async () =>
  (await Sandbox.list({ query: { state: ['running', 'paused'], metadata } }).nextItems())

await r.step('create with mcp on a template without mcp-gateway fails as on E2B', async () => {
  const err = await expectReject(
    Sandbox.create('base', { metadata, mcp: { some_server: {} } }),
    SandboxError,
    'create with mcp',
  )
  assert.match(err.message, /Failed to start MCP gateway/, err.message)
  assert.deepEqual(await leftovers(), [], 'the SDK killed the sandbox it made')
})

await r.step('an mcp config that is not an object is refused', async () => {
  // The SDK passes the option through as it is given.
  const err = await expectReject(
    Sandbox.create('base', { metadata, mcp: ['not', 'an', 'object'] }),
    Error,
    'create with an array as mcp',
  )
  assert.ok(err instanceof InvalidArgumentError || /400|mcp must be an object/.test(err.message), `${err.constructor.name}: ${err.message}`)
  assert.match(err.message, /mcp must be an object/, err.message)
  assert.deepEqual(await leftovers(), [], 'no sandbox was made')
})

r.done()
