// The browser test of Airlock's web console (run by
// integration/console_browser_test.go, TestConsoleBrowser): playwright-core
// drives Debian's chromium (never a downloaded browser) through the console
// at CONSOLE_URL/ui/ as a user would, relying only on the data-testid
// contract (docs/console.md). Each step prints "step N: name ok (ms)"; on a
// failure it writes failure.png beside the screenshots and exits 1.
//
// Environment: CONSOLE_URL (the server), CONSOLE_MEMBER_KEY and
// CONSOLE_ADMIN_KEY (keys of the project named default), CONSOLE_REVOKED_KEY
// (a revoked key), CONSOLE_BUILD_ID (a finished build to show),
// CONSOLE_ARTIFACTS (where screenshots go), CONSOLE_CHROMIUM (the browser,
// default /usr/bin/chromium), CONSOLE_TIMEOUT_MS (the longest wait for one
// condition, default 180000).
//
// Nothing here reaches outside the machine: the browser talks only to the
// server, and the denied egress attempt is a DNS query that Airlock's own
// resolver refuses (the sandbox's policy denies everything).

import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`console.mjs: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

const base = need('CONSOLE_URL').replace(/\/+$/, '');
const ui = `${base}/ui/`;
const memberKey = need('CONSOLE_MEMBER_KEY');
const adminKey = need('CONSOLE_ADMIN_KEY');
const revokedKey = process.env.CONSOLE_REVOKED_KEY || '';
const buildID = process.env.CONSOLE_BUILD_ID || '';
const artifacts = need('CONSOLE_ARTIFACTS');
const chromiumPath = process.env.CONSOLE_CHROMIUM || '/usr/bin/chromium';
const T = Number(process.env.CONSOLE_TIMEOUT_MS || 180000);
const cookieName = 'airlock_session';
mkdirSync(artifacts, { recursive: true });

// ---- small helpers ---------------------------------------------------------

let page;
let context;
let stepNo = 0;
let shotNo = 0;
const pageErrors = [];

// problems are failed checks that do not stop the walk through the
// console (the last step fails if there is any).
const problems = [];

// step runs fn as step N and prints its outcome and duration.
async function step(name, fn) {
  stepNo++;
  const start = Date.now();
  const before = problems.length;
  try {
    await fn();
  } catch (err) {
    console.log(`step ${stepNo}: ${name} FAILED after ${Date.now() - start} ms`);
    throw err;
  }
  const n = problems.length - before;
  console.log(`step ${stepNo}: ${name} ${n ? `found ${n} problem${n > 1 ? 's' : ''}` : 'ok'} (${Date.now() - start} ms)`);
}

// check runs fn; its failure is recorded as a problem (reported by the
// last step) and the walk goes on.
async function check(what, fn) {
  try {
    await fn();
  } catch (err) {
    problems.push(`step ${stepNo}: ${what}: ${err.message}`);
    console.log(`  PROBLEM: ${what}: ${err.message}`);
  }
}

// until polls cond (an async function returning a truthy value when the
// condition holds) until it holds or timeout passes; it returns cond's
// value. what describes the condition in the error; detail, when given,
// adds the last observed state.
async function until(what, cond, { timeout = T, detail } = {}) {
  const deadline = Date.now() + timeout;
  let lastErr;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v;
    } catch (err) {
      lastErr = err;
    }
    if (Date.now() > deadline) {
      let d = '';
      if (detail) {
        try {
          d = `; last seen: ${await detail()}`;
        } catch (err) {
          d = `; (detail: ${err.message})`;
        }
      }
      throw new Error(`timed out after ${timeout} ms waiting for ${what}${d}${lastErr ? ` (last error: ${lastErr.message})` : ''}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

const tid = (id) => page.getByTestId(id);

// gate is a request held by a route: seen resolves when it arrived
// (arrived()), released when the test lets it answer (release()).
function gate() {
  const g = { used: false };
  g.seen = new Promise((resolve) => {
    g.arrived = resolve;
  });
  g.released = new Promise((resolve) => {
    g.release = resolve;
  });
  return g;
}

// within waits for promise, at most timeout.
async function within(what, promise, timeout = T) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeout} ms waiting for ${what}`)), timeout);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

// visible waits for a test id (or locator) to be visible.
async function visible(idOrLocator, timeout = T) {
  const loc = typeof idOrLocator === 'string' ? tid(idOrLocator) : idOrLocator;
  await loc.first().waitFor({ state: 'visible', timeout });
  return loc.first();
}

async function text(loc) {
  return ((await loc.first().textContent({ timeout: 5000 })) || '').trim();
}

async function hash() {
  return page.evaluate(() => window.location.hash);
}

async function screenshot(name) {
  shotNo++;
  const file = path.join(artifacts, `${String(shotNo).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  console.log(`  screenshot ${file}`);
}

// A marker set on the page's window: a reload would lose it, so a live
// update that is really a reload is caught.
async function setMarker() {
  await page.evaluate(() => {
    window.__airlockConsoleTest = 'no-reload';
  });
}
async function assertNoReload(what) {
  const m = await page.evaluate(() => window.__airlockConsoleTest);
  if (m !== 'no-reload') throw new Error(`the page reloaded during ${what}`);
}

async function sessionCookie() {
  return (await context.cookies(base)).find((c) => c.name === cookieName);
}

// fetchFromPage sends a request from the page (with its cookie) and
// returns the status and the parsed body (or text).
async function fetchFromPage(p, init = {}) {
  return page.evaluate(
    async ([p, init]) => {
      const r = await fetch(p, { credentials: 'same-origin', ...init });
      const t = await r.text();
      let body = t;
      try {
        body = JSON.parse(t);
      } catch {}
      return { status: r.status, body };
    },
    [p, init],
  );
}

async function signIn(key, role) {
  await page.goto(`${ui}#/signin`);
  await visible('signin-key');
  await tid('signin-key').fill(key);
  await tid('signin-submit').click();
  const who = await visible('whoami');
  await until(`whoami to show role ${role}`, async () => (await text(who)).includes(role), {
    detail: async () => text(who),
  });
  await until('the default route #/sandboxes after sign-in', async () => (await hash()).startsWith('#/sandboxes'), {
    detail: hash,
  });
  const c = await sessionCookie();
  if (!c) throw new Error(`no ${cookieName} cookie after sign-in`);
  if (!c.httpOnly) throw new Error(`the ${cookieName} cookie is not HttpOnly`);
  if (c.sameSite !== 'Strict') throw new Error(`the ${cookieName} cookie is SameSite=${c.sameSite}, want Strict`);
  const jsVisible = await page.evaluate((n) => document.cookie.includes(n), cookieName);
  if (jsVisible) throw new Error(`the ${cookieName} cookie is readable from JavaScript`);
}

async function signOut() {
  await (await visible('signout')).click();
  await visible('signin-key');
  await until(`the ${cookieName} cookie to be cleared`, async () => !(await sessionCookie()));
}

async function navTo(navID, tableID) {
  await (await visible(navID)).click();
  return visible(tableID);
}

// row returns the list row of sandbox id.
const row = (id) => page.locator(`[data-testid="sandbox-row"][data-id="${id}"]`);

// terminalText is what the terminal shows (xterm's DOM rows).
async function terminalText() {
  const term = tid('terminal');
  const rows = term.locator('.xterm-rows');
  if ((await rows.count()) > 0) return (await rows.first().innerText()) || '';
  return (await term.first().innerText()) || '';
}

function lines(s) {
  return s.split('\n').map((l) => l.replace(/\u00a0/g, ' ').trim());
}

// typeInTerminal focuses the terminal and types a line.
async function typeInTerminal(line) {
  await tid('terminal').first().click();
  await page.keyboard.type(line, { delay: 20 });
  await page.keyboard.press('Enter');
}

// ---- the test --------------------------------------------------------------

async function main() {
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    // root in CI: chromium's own sandbox needs an unprivileged user.
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
    timeout: T,
  });
  try {
    context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
    page.setDefaultTimeout(T);
    page.on('pageerror', (err) => {
      pageErrors.push(`step ${stepNo}: uncaught: ${err.message}`);
      console.log(`  page error: ${err.message}`);
    });
    page.on('console', (msg) => {
      if (msg.type() === 'error' || msg.type() === 'warning') {
        const t = msg.text();
        console.log(`  browser ${msg.type()}: ${t}`);
        if (/Content[- ]Security[- ]Policy/i.test(t)) pageErrors.push(`step ${stepNo}: CSP violation: ${t}`);
      }
    });
    await run();
  } catch (err) {
    console.log(`FAILED: ${err.stack || err}`);
    if (page) {
      try {
        console.log(`  at ${page.url()}`);
        const banner = await tid('error').first().textContent({ timeout: 1000 }).catch(() => null);
        if (banner) console.log(`  error banner: ${banner.trim()}`);
        const file = path.join(artifacts, 'failure.png');
        await page.screenshot({ path: file, fullPage: true });
        console.log(`  screenshot ${file}`);
      } catch (e) {
        console.log(`  (no failure screenshot: ${e.message})`);
      }
    }
    await browser.close().catch(() => {});
    process.exit(1);
  }
  await browser.close();
}

async function run() {
  let sandboxID;
  let terminalShells = []; // PTY processes running while the terminal showed

  await step('a bad key is refused', async () => {
    const resp = await page.goto(ui);
    if (!resp || !resp.ok()) throw new Error(`GET ${ui}: ${resp ? resp.status() : 'no response'}`);
    await visible('signin-key');
    await until('#/signin without a session', async () => (await hash()).startsWith('#/signin'), { detail: hash });
    await screenshot('signin');
    // A malformed key, a well-formed key with a wrong secret (the member
    // key's last character changed) and a revoked key.
    const last = memberKey.slice(-1);
    const bad = ['not-a-key', memberKey.slice(0, -1) + (last === 'a' ? 'b' : 'a')];
    if (revokedKey) bad.push(revokedKey);
    for (const key of bad) {
      await page.reload(); // a fresh page: the banner holds only this attempt's error
      await visible('signin-key');
      await tid('signin-key').fill(key);
      await tid('signin-submit').click();
      const banner = tid('error');
      await until(`the error banner after signing in with a bad key (${key.slice(0, 8)}…)`, async () => (await text(banner)) !== '', {
        detail: async () => `banner ${JSON.stringify(await text(banner))}, ${await hash()}`,
      });
      if (!(await tid('signin-key').isVisible())) throw new Error('the sign-in form went away after a bad key');
      if (!(await hash()).startsWith('#/signin')) throw new Error(`left the sign-in page after a bad key: ${await hash()}`);
      if (await sessionCookie()) throw new Error(`a bad key got a ${cookieName} cookie`);
      console.log(`  refused: ${await text(banner)}`);
    }
  });

  await step('sign in as a member', async () => {
    await signIn(memberKey, 'member');
    await visible('sandboxes-table');
    for (const admin of ['nav-projects', 'nav-keys']) {
      if (await tid(admin).isVisible()) throw new Error(`${admin} is shown to a member`);
    }
    await setMarker();
  });

  await step('create a sandbox with the form; it runs in the live list', async () => {
    await visible('create-submit');
    const before = new Set(await page.locator('[data-testid="sandbox-row"]').evaluateAll((rows) => rows.map((r) => r.dataset.id)));
    // Template: the server's default (minimal) when the form offers it.
    const tpl = tid('create-template');
    if ((await tpl.evaluate((e) => e.tagName)) === 'SELECT') {
      const minimal = await until('the minimal template among create-template\'s options', async () => {
        const options = await tpl.locator('option').evaluateAll((os) => os.map((o) => ({ value: o.value, label: o.textContent })));
        return options.find((o) => /minimal/.test(o.value) || /minimal/.test(o.label));
      });
      await tpl.selectOption(minimal.value);
    } else {
      await tpl.fill('minimal');
    }
    await tid('create-cpus').fill('1');
    await tid('create-memory').fill('256');
    // Egress: deny everything (the egress step needs a denial).
    await tid('create-egress').selectOption('deny-all');
    await tid('create-submit').click();
    sandboxID = await until(
      'a new sandbox-row in the live list',
      async () => {
        const ids = await page.locator('[data-testid="sandbox-row"]').evaluateAll((rows) => rows.map((r) => r.dataset.id));
        return ids.find((id) => id && !before.has(id));
      },
      { detail: async () => `banner ${JSON.stringify(await text(tid('error')))}` },
    );
    console.log(`  created ${sandboxID}`);
    const state = row(sandboxID).getByTestId('sandbox-state');
    const seen = new Set();
    await until(
      `${sandboxID} to reach running in the list`,
      async () => {
        const s = await text(state);
        seen.add(s);
        if (s === 'failed' || s === 'deleted') throw new Error(`the sandbox is ${s}`);
        return s === 'running';
      },
      { timeout: T, detail: async () => [...seen].join(' → ') },
    );
    console.log(`  states seen in the list: ${[...seen].join(', ')}`);
    await assertNoReload('the live list update');
    await screenshot('sandboxes');
  });

  await step('open the sandbox', async () => {
    await row(sandboxID).getByTestId('sandbox-link').click();
    await until(`#/sandboxes/${sandboxID}`, async () => (await hash()) === `#/sandboxes/${sandboxID}`, { detail: hash });
    await until('sandbox-id to show the ID', async () => (await text(await visible('sandbox-id'))).includes(sandboxID));
    await until('sandbox-state running', async () => (await text(await visible('sandbox-state'))) === 'running', {
      detail: async () => text(tid('sandbox-state')),
    });
    await assertNoReload('opening the sandbox');
  });

  await step('terminal: echo hello', async () => {
    await (await visible('tab-terminal')).click();
    await visible('terminal');
    // The PTY shell is up when it printed its prompt.
    await until('the shell prompt in the terminal', async () => (await terminalText()).trim() !== '', {
      detail: async () => JSON.stringify(await terminalText()),
    });
    // The quotes make the output differ from the echoed input line.
    await typeInTerminal("echo hel''lo");
    await until('a line "hello" of output in the terminal', async () => lines(await terminalText()).includes('hello'), {
      detail: async () => JSON.stringify(await terminalText()),
    });
    // The terminal's shell is a running PTY process of the sandbox (the
    // check after leaving the page relies on the list showing it).
    const procs = await fetchFromPage(`/v1/sandboxes/${sandboxID}/processes`);
    terminalShells = procs.status === 200 ? procs.body.processes.filter((p) => p.pty && p.running).map((p) => p.id) : [];
    if (terminalShells.length === 0) throw new Error(`no running PTY process while the terminal is open: ${JSON.stringify(procs)}`);
    console.log(`  the terminal's shell: ${terminalShells.join(', ')}`);
    await screenshot('terminal');
  });

  await step('files: upload, list, download', async () => {
    // The slow answers of a loaded machine, made certain: the tab's first
    // list (of /) answers only after the list of /tmp, and the file is
    // chosen while /tmp's list has not answered yet. The upload still goes
    // into /tmp (the directory asked for last), the late answer for / does
    // not replace /tmp's, and the list after the upload shows the file.
    // (Before, the upload went into / and the page listed an empty /tmp.)
    const held = { '/': gate(), '/tmp': gate() };
    const isList = (url) => url.pathname.endsWith(`/v1/sandboxes/${sandboxID}/files/list`);
    const holdList = async (route) => {
      const g = held[new URL(route.request().url()).searchParams.get('path')];
      if (!g || g.used) return route.continue();
      g.used = true;
      const resp = await route.fetch(); // the server's answer, given to the page later
      g.arrived();
      await g.released;
      await route.fulfill({ response: resp });
    };
    const listAnswered = (dir) => page.waitForResponse((r) => {
      const u = new URL(r.url());
      return isList(u) && u.searchParams.get('path') === dir;
    }, { timeout: T });
    const transfers = [];
    const onRequest = (r) => {
      if (r.method() === 'POST' && r.url().endsWith(`/v1/sandboxes/${sandboxID}/files/transfers`)) transfers.push(JSON.parse(r.postData() || '{}'));
    };
    page.on('request', onRequest);
    await page.route(isList, holdList);
    await (await visible('tab-files')).click();
    await visible('files-list');
    await within('the files tab to list /', held['/'].seen);
    const p = tid('files-path');
    await p.fill('/tmp');
    await p.press('Enter');
    await within('the list of /tmp', held['/tmp'].seen);
    const name = `console-${randomBytes(6).toString('hex')}.bin`;
    const content = randomBytes(64 * 1024 + 17); // binary, not a multiple of anything
    const want = createHash('sha256').update(content).digest('hex');
    const uploaded = page.waitForResponse((r) => r.url().includes(`/data/v1/sandboxes/${sandboxID}/files/upload`), { timeout: T });
    await tid('files-upload').setInputFiles({ name, mimeType: 'application/octet-stream', buffer: content });
    const tmpListed = listAnswered('/tmp');
    held['/tmp'].release();
    await tmpListed;
    const rootListed = listAnswered('/');
    held['/'].release();
    await rootListed;
    const up = await uploaded;
    if (up.status() !== 200) throw new Error(`upload of ${name}: ${up.status()} ${await up.text()}`);
    await page.unroute(isList, holdList);
    page.off('request', onRequest);
    const to = transfers.filter((t) => t.direction === 'upload').map((t) => t.path);
    if (to.length !== 1 || to[0] !== `/tmp/${name}`) {
      throw new Error(`the upload went to ${JSON.stringify(to)}, want ["/tmp/${name}"] (the directory asked for last)`);
    }
    const fileRow = page.locator(`[data-testid="file-row"][data-name="${name}"]`);
    await visible(fileRow);
    const shown = await p.inputValue();
    if (shown !== '/tmp') throw new Error(`the files tab shows ${shown} after the upload, want /tmp (a late answer for an older list replaced the newer one)`);
    const [download] = await Promise.all([page.waitForEvent('download', { timeout: T }), fileRow.getByTestId('file-download').first().click()]);
    const failure = await download.failure();
    if (failure) throw new Error(`download of ${name} failed: ${failure}`);
    const got = createHash('sha256').update(readFileSync(await download.path())).digest('hex');
    if (got !== want) throw new Error(`downloaded ${name} has sha256 ${got}, uploaded ${want}`);
    console.log(`  ${name}: ${content.length} bytes, sha256 ${want} both ways (saved as ${download.suggestedFilename()})`);
    await screenshot('files');
  });

  await step('egress: a denied attempt shows live in the decision log', async () => {
    const host = `console-denied-${randomBytes(3).toString('hex')}.example`;
    // A DNS query of a name the deny-all policy refuses, typed in the
    // terminal to run a few seconds later (in a session of its own, so
    // the terminal's hang-up when the tab changes does not end it), so it
    // lands while the egress tab shows.
    await (await visible('tab-terminal')).click();
    await visible('terminal');
    await until('the shell prompt in the terminal', async () => (await terminalText()).trim() !== '');
    await typeInTerminal(`setsid sh -c 'sleep 4; nslookup ${host}; echo queried-${host} >/tmp/egress-attempt' </dev/null >/dev/null 2>&1 &`);
    await (await visible('tab-egress')).click();
    await visible('egress-policy');
    await visible('egress-decisions');
    const deny = page.locator('[data-testid="egress-decision"][data-verdict="deny"]').filter({ hasText: host });
    const atOpen = await deny.count();
    await visible(deny);
    console.log(`  denied ${host} (${atOpen === 0 ? 'appeared live' : 'already listed when the tab opened'}): ${await text(deny)}`);
    console.log(`  policy: ${await text(tid('egress-policy'))}`);
    await assertNoReload('the decision log');
    await screenshot('egress');
  });

  await step('processes: live output of a process', async () => {
    // A process started through the API from outside the page, printing
    // a line a second: its output must show live in process-output.
    const r = await fetch(`${base}/v1/sandboxes/${sandboxID}/commands`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${memberKey}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ args: ['sh', '-c', 'i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo tick-$i; sleep 1; done'], background: true, timeout_secs: 600 }),
    });
    const cmd = await r.json();
    if (!r.ok || !cmd.process_id) throw new Error(`POST …/commands: ${r.status} ${JSON.stringify(cmd)}`);
    await (await visible('tab-processes')).click();
    await visible('processes-table');
    const procRow = page.locator(`[data-testid="process-row"][data-id="${cmd.process_id}"]`);
    await (await visible(procRow)).click();
    const out = tid('process-output');
    const ticks = async () => Math.max(0, ...[...(await text(out)).matchAll(/tick-(\d+)/g)].map((m) => Number(m[1])));
    const first = await until('tick lines in process-output', ticks, { detail: async () => JSON.stringify(await text(out)) });
    await until(`process-output to go on past tick-${first}`, async () => (await ticks()) >= first + 2, {
      detail: async () => JSON.stringify(await text(out)),
    });
    await screenshot('processes');
  });

  await step('the sandbox\'s operations tab', async () => {
    await (await visible('tab-operations')).click();
    await visible('operations-table');
    await visible(page.locator('[data-testid="operation-row"]'));
    await screenshot('sandbox-operations');
  });

  await step('pause from outside, resume with the page\'s button; sandbox-state follows live', async () => {
    const state = tid('sandbox-state');
    const r = await fetch(`${base}/v1/sandboxes/${sandboxID}/pause`, { method: 'POST', headers: { Authorization: `Bearer ${memberKey}` } });
    if (!r.ok) throw new Error(`POST …/pause: ${r.status} ${await r.text()}`);
    await until('sandbox-state paused', async () => (await text(state)) === 'paused', { detail: async () => text(state) });
    await screenshot('sandbox-paused');
    await (await visible('action-resume')).click();
    await until('sandbox-state running again', async () => (await text(state)) === 'running', { detail: async () => text(state) });
    await assertNoReload('pause and resume');
  });

  await step('leaving the sandbox page ends its terminal\'s shell', async () => {
    await (await visible('nav-sandboxes')).click();
    await visible(row(sandboxID));
    await check('no terminal shell is left running once the sandbox page is left', () => until(
      'no PTY shell of the closed terminal left running',
      async () => {
        const list = await fetchFromPage(`/v1/sandboxes/${sandboxID}/processes`);
        if (list.status !== 200) return false;
        for (const id of terminalShells) {
          if (!list.body.processes.some((p) => p.id === id)) throw new Error(`the terminal's shell ${id} is not listed`);
        }
        return list.body.processes.filter((p) => p.pty && p.running).length === 0;
      },
      {
        timeout: 30000,
        detail: async () => {
          const list = await fetchFromPage(`/v1/sandboxes/${sandboxID}/processes`);
          return JSON.stringify(list.body.processes.filter((p) => p.pty && p.running).map((p) => ({ id: p.id, started: p.started_at })));
        },
      },
    ));
  });

  await step('pause and resume with the row buttons; the list follows live', async () => {
    const rowState = row(sandboxID).getByTestId('sandbox-state');
    await row(sandboxID).getByTestId('action-pause').click();
    await until('the row paused', async () => (await text(rowState)) === 'paused', { detail: async () => text(rowState) });
    // The state filter shows it among the paused ones, then all again.
    await tid('filter-state').selectOption('paused');
    await until('the row in the paused filter', async () => (await text(rowState)) === 'paused', { detail: async () => text(rowState) });
    await screenshot('sandboxes-paused');
    await tid('filter-state').selectOption({ index: 0 });
    await row(sandboxID).getByTestId('action-resume').click();
    await until('the row running again', async () => (await text(rowState)) === 'running', { detail: async () => text(rowState) });
    await assertNoReload('pause and resume');
  });

  await step('templates and a build log', async () => {
    await navTo('nav-templates', 'templates-table');
    await visible(page.locator('[data-testid="template-row"]'));
    await screenshot('templates');
    if (buildID) {
      await visible('builds-table');
      const buildRow = page.locator(`[data-testid="build-row"][data-id="${buildID}"]`);
      await visible(buildRow);
      await buildRow.getByTestId('build-link').click();
      await until(`#/builds/${buildID}`, async () => (await hash()) === `#/builds/${buildID}`, { detail: hash });
      const log = await visible('build-log');
      await until('the build log to show the build succeeded', async () => /succeeded/.test(await text(log)), {
        detail: async () => text(log),
      });
      await screenshot('build-log');
    }
  });

  await step('environments and operations', async () => {
    await navTo('nav-environments', 'environments-table');
    await until('an environment in the table', async () => (await text(tid('environments-table'))).includes('runc'), {
      detail: async () => text(tid('environments-table')),
    });
    await screenshot('environments');
    await navTo('nav-operations', 'operations-table');
    await visible(page.locator('[data-testid="operation-row"]'));
    await screenshot('operations');
  });

  await step('a cookie-authenticated mutation needs the CSRF header and the same origin', async () => {
    const c = await sessionCookie();
    const post = async (headers) => {
      const r = await fetch(`${base}/v1/sandboxes`, {
        method: 'POST',
        headers: { Cookie: `${cookieName}=${c.value}`, 'Content-Type': 'application/json', ...headers },
        body: '{}',
      });
      const body = await r.json().catch(() => ({}));
      return { status: r.status, code: body.code };
    };
    const noHeader = await post({});
    if (noHeader.status !== 403 || noHeader.code !== 'csrf_failed') throw new Error(`POST without X-Airlock-CSRF: ${JSON.stringify(noHeader)}, want 403 csrf_failed`);
    const session = await fetchFromPage('/ui/session');
    if (session.status !== 200 || !session.body.csrf) throw new Error(`GET /ui/session: ${JSON.stringify(session)}`);
    const crossSite = await post({ 'X-Airlock-CSRF': session.body.csrf, Origin: 'https://evil.example' });
    if (crossSite.status !== 403 || crossSite.code !== 'csrf_failed') throw new Error(`POST from another origin: ${JSON.stringify(crossSite)}, want 403 csrf_failed`);
  });

  await step('delete the sandbox (confirmed)', async () => {
    await (await visible('nav-sandboxes')).click();
    await visible(row(sandboxID));
    let dialog;
    page.once('dialog', async (d) => {
      dialog = d.type();
      await d.accept();
    });
    await row(sandboxID).getByTestId('action-delete').click();
    await until('the confirm dialog', async () => dialog);
    if (dialog !== 'confirm') throw new Error(`delete asked with a ${dialog} dialog, want confirm`);
    await until(
      `${sandboxID} to leave the list or show deleting/deleted`,
      async () => {
        if ((await row(sandboxID).count()) === 0) return true;
        return ['deleting', 'deleted'].includes(await text(row(sandboxID).getByTestId('sandbox-state')));
      },
      { detail: async () => text(row(sandboxID)) },
    );
    await until(`GET /v1/sandboxes/${sandboxID} to say deleted`, async () => {
      const r = await fetchFromPage(`/v1/sandboxes/${sandboxID}`);
      return r.status === 200 && r.body.state === 'deleted';
    });
    await assertNoReload('delete');
  });

  await step('sign out; the cookie is gone and the console asks to sign in', async () => {
    await signOut();
    const api = await fetchFromPage('/v1/sandboxes');
    if (api.status !== 401) throw new Error(`GET /v1/sandboxes after sign-out: ${api.status}, want 401`);
    const s = await fetchFromPage('/ui/session');
    if (s.status !== 401) throw new Error(`GET /ui/session after sign-out: ${s.status}, want 401`);
    await page.goto(`${ui}#/sandboxes`);
    await visible('signin-key');
    await until('#/sandboxes to send back to #/signin', async () => (await hash()).startsWith('#/signin'), { detail: hash });
  });

  await step('sign in as admin: pools, projects and keys', async () => {
    await signIn(adminKey, 'admin');
    // Pools are an admin's (GET /v1/pools is admin-only).
    await navTo('nav-pools', 'pools-table');
    await screenshot('pools');
    await navTo('nav-projects', 'projects-table');
    await until('the default project in the table', async () => (await text(tid('projects-table'))).includes('default'));
    await screenshot('projects');
    await navTo('nav-keys', 'keys-table');
    await until('the member key in the table', async () => (await text(tid('keys-table'))).includes('console-browser-test'));
    await screenshot('keys');
    await signOut();
  });

  await step('no problem found: no leaked shell, no uncaught page error, no CSP violation', async () => {
    if (pageErrors.length > 0) {
      const counts = new Map();
      for (const e of pageErrors) counts.set(e, (counts.get(e) || 0) + 1);
      const list = [...counts].map(([e, n]) => (n > 1 ? `${e} (${n} times)` : e));
      problems.push(`the console had ${pageErrors.length} errors:\n    ${list.join('\n    ')}`);
    }
    if (problems.length > 0) throw new Error(`${problems.length} problems:\n  ${problems.join('\n  ')}`);
  });
}

await main();
