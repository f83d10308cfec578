// One headless Chromium per test file, driven by playwright-core (NOTES §12): Debian's chromium, found
// at CHROMIUM_PATH or /usr/bin/chromium. Missing browser: the file is skipped with a loud message, or
// fails when CI=true (.ci/run installs it; CI must never go green by skipping the browser tests).
//
//   const browser = await startBrowser(t);   // null when skipped or failed
//   const page = await newPage(browser, gw.url);
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

interface Host {
  teardown(fn: () => unknown): void;
  fail(message: string): void;
  plan(n: number, comment?: string): void;
}

export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
/** The viewport of every test page and screenshot: a laptop. */
export const VIEWPORT = { width: 1280, height: 800 };

export async function startBrowser(t: Host): Promise<Browser | null> {
  if (!existsSync(CHROMIUM_PATH)) {
    const reason = `no Chromium at ${CHROMIUM_PATH} (apt-get install -y chromium, or set CHROMIUM_PATH)`;
    if (process.env.CI === 'true') {
      t.fail(`FAILED (CI=true, browser tests may not be skipped): ${reason}`);
      return null;
    }
    process.stderr.write(`\n*** SKIPPED: ${reason}\n\n`);
    t.plan(0, `SKIPPED: ${reason}`);
    return null;
  }
  // As root Chromium refuses to start without --no-sandbox (NOTES §12).
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, args: ['--no-sandbox'] });
  t.teardown(() => browser.close());
  return browser;
}

/** A page in a fresh context (its own cookies), with clipboard access granted for `origin`. */
export async function newPage(browser: Browser, origin: string): Promise<Page> {
  const context = await browser.newContext({ viewport: VIEWPORT });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  return page;
}
