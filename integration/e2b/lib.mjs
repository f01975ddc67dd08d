// Shared by smoke.mjs and smoke-old.mjs: the environment an E2B client is
// pointed at Airlock with, a step runner that prints each step's name and
// timing and stops at the first failure, and small waiting helpers.
//
// Nothing here talks to anything but the URLs in the environment.

import assert from 'node:assert/strict'

// env returns the variables an unchanged E2B client reads (docs/e2b.md);
// a missing one is a usage error, not a test failure.
export function env() {
  const out = {}
  for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL']) {
    const v = process.env[name]
    if (!v) {
      console.error(`smoke: ${name} is not set (see docs/e2b.md)`)
      process.exit(2)
    }
    out[name] = v
  }
  return out
}

// Runner runs named steps in order. The first failing step prints its error,
// kills every sandbox the script created (best effort, so a failure leaves as
// little as possible behind) and exits non-zero.
export class Runner {
  constructor(name) {
    this.name = name
    this.count = 0
    this.sandboxes = []
    this.started = Date.now()
    process.on('unhandledRejection', (err) => this.#fail('(unhandled promise rejection)', err))
  }

  // track remembers a sandbox to kill if a later step fails.
  track(sbx) {
    this.sandboxes.push(sbx)
    return sbx
  }

  // step runs fn, bounded by timeoutMs, and prints "ok <name> (N ms)".
  async step(name, fn, timeoutMs = 180_000) {
    const t0 = Date.now()
    let timer
    try {
      await Promise.race([
        fn(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`step did not finish within ${timeoutMs} ms`)), timeoutMs)
        }),
      ])
    } catch (err) {
      await this.#fail(name, err, Date.now() - t0)
    } finally {
      clearTimeout(timer)
    }
    this.count++
    console.log(`${this.name}: ok   ${name} (${Date.now() - t0} ms)`)
  }

  done() {
    console.log(`${this.name}: all ${this.count} steps succeeded in ${Date.now() - this.started} ms`)
    process.exit(0)
  }

  async #fail(name, err, ms) {
    const took = ms === undefined ? '' : ` (${ms} ms)`
    console.error(`${this.name}: FAIL ${name}${took}`)
    console.error(err && err.stack ? err.stack : String(err))
    if (err && err.cause) console.error('cause:', err.cause)
    for (const sbx of this.sandboxes) {
      try {
        await sbx.kill({ requestTimeoutMs: 30_000 })
      } catch (killErr) {
        console.error(`${this.name}: could not kill ${sbx.sandboxId} after the failure: ${killErr}`)
      }
    }
    process.exit(1)
  }
}

// waitFor polls fn until it returns a truthy value (returned) or timeoutMs
// passes (then it throws with what describe() says about the last attempt).
export async function waitFor(what, fn, { timeoutMs = 30_000, intervalMs = 200, describe = () => '' } = {}) {
  const deadline = Date.now() + timeoutMs
  let lastErr
  for (;;) {
    try {
      const v = await fn()
      if (v) return v
    } catch (err) {
      lastErr = err
    }
    if (Date.now() > deadline) {
      const extra = describe()
      throw new Error(`${what}: not within ${timeoutMs} ms${extra ? `; ${extra}` : ''}${lastErr ? `; last error: ${lastErr}` : ''}`)
    }
    await new Promise((r) => setTimeout(r, intervalMs))
  }
}

// expectReject awaits p and asserts it rejects with an instance of cls,
// returning the error.
export async function expectReject(p, cls, what) {
  let err
  try {
    const v = await p
    assert.fail(`${what}: expected ${cls.name}, but it resolved with ${JSON.stringify(v)}`)
  } catch (e) {
    err = e
  }
  if (err instanceof assert.AssertionError) throw err
  assert.ok(err instanceof cls, `${what}: expected ${cls.name}, got ${err && err.constructor && err.constructor.name}: ${err}`)
  return err
}

// requestLog is an SDK `logger` that keeps the control-plane requests and
// responses the SDK logs ("Request POST <url>", "Response: <status> …"),
// so a step can prove which endpoint and status an SDK call used.
export function requestLog() {
  const lines = []
  const keep = (...args) => lines.push(args.map(String).join(' '))
  return {
    lines,
    logger: { info: keep, error: keep, debug: () => {}, warn: () => {} },
    // requests lists "METHOD /path" of the logged control-plane requests.
    requests() {
      return lines
        .filter((l) => l.startsWith('Request ') && !l.startsWith('Request: '))
        .map((l) => {
          const [, method, url] = l.split(' ')
          return `${method} ${new URL(url).pathname}`
        })
    },
    // statuses lists the HTTP statuses of the logged responses.
    statuses() {
      return lines.filter((l) => l.startsWith('Response: ')).map((l) => Number(l.split(' ')[1]))
        .filter(Number.isInteger)
    },
  }
}

// adminKey returns PARITY_ADMIN_API_KEY, the admin key template builds
// take (as Airlock's own builds do); a missing one is a usage error.
export function adminKey(script) {
  const key = process.env.PARITY_ADMIN_API_KEY
  if (!key) {
    console.error(`${script}: PARITY_ADMIN_API_KEY is not set`)
    process.exit(2)
  }
  return key
}

// buildLogged runs Template.build(t, name, opts) collecting the build log
// into logs (emptied first), printed if the build fails.
export async function buildLogged(Template, t, name, opts, logs) {
  logs.length = 0
  try {
    return await Template.build(t, name, { ...opts, onBuildLogs: (e) => logs.push(e.message) })
  } catch (err) {
    console.error(`the build log of ${name}:\n${logs.join('\n')}`)
    throw err
  }
}
