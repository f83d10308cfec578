// A member's console requests take turns per account (docs/console.md "One account's pages take turns";
// src/limits/account-gate.ts): one of an account's requests runs at a time and the others wait in line,
// while other accounts and operators never wait behind it; a form is read before its request waits for
// the turn, and the ledger download holds the turn only while it reads and formats a page, not while a
// slow reader's socket drains. The noisy-neighbour outcome is
// test/isolation/noisy-console.test.ts; this file checks who waits for whom, over real HTTP.
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { Store } from '../../src/store/types.ts';

// The embedded store, its newest-first ledger read (the credit page's) held for acme while `hold` is set:
// a request with work under way.
const inner = createMemoryStore();
let hold: Promise<void> | undefined;
let holding = 0;
// And the ledger download's later pages, while `holdPages` is set.
let holdPages: Promise<void> | undefined;
let holdingPages = 0;
const store: Store = {
  ...inner,
  ledger: async (account, after, limit) => {
    if (holdPages && account === 'acme' && after !== undefined) {
      holdingPages++;
      await holdPages;
    }
    return inner.ledger(account, after, limit);
  },
  ledgerBefore: async (account, before, limit) => {
    if (hold && account === 'acme') {
      holding++;
      await hold;
    }
    return inner.ledgerBefore(account, before, limit);
  },
};
const gw = await startGateway(t, { store });
async function session(gw: TestGateway, body: unknown): Promise<string> {
  const { body: link } = await gw.admin('/admin/console/sessions', { body });
  const res = await fetch(link.url, { redirect: 'manual' });
  return res.headers.get('set-cookie')!.split(';')[0]!;
}
const [acme, globex, operator] = [
  await session(gw, { account: 'acme' }),
  await session(gw, { account: 'globex' }),
  await session(gw, { operator: true }),
];
const page = (account: string, cookie: string) =>
  fetch(`${gw.url}/console/accounts/${account}/keys`, { headers: { cookie }, signal: AbortSignal.timeout(20_000) });

/**
 * Writes a request head (and some of its body) on a raw socket; the rest when the test says. The socket
 * is paused at the first bytes of the response, so a reader stalls until the test resumes it.
 */
function raw(head: string): { socket: Socket; status: Promise<number>; first: Promise<string> } {
  const u = new URL(gw.url);
  const socket = connect(Number(u.port), u.hostname);
  socket.on('error', () => {});
  socket.write(head);
  const first = new Promise<string>((resolve) => {
    socket.once('data', (b: Buffer) => {
      socket.pause();
      resolve(b.toString('utf8'));
    });
    socket.once('close', () => resolve(''));
  });
  const status = first.then((text) => Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0));
  return { socket, status, first };
}

t.test("a slow form holds no turn; a request's work does: the member's next page waits for it, nobody else does", async (t) => {
  const key = await gw.createKey({ account: 'acme', env: 'test', name: 'k' });
  const body = 'action=rename&name=renamed';
  const post = raw(
    `POST /console/accounts/acme/keys/${key.id} HTTP/1.1\r\nhost: ${new URL(gw.url).host}\r\ncookie: ${acme}\r\n` +
      `origin: ${gw.url}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 10)}`,
  );
  t.teardown(() => post.socket.destroy());
  await sleep(200); // the post is reading its form, which stalls
  let posted = false;
  void post.status.then(() => (posted = true));
  t.equal((await page('acme', acme)).status, 200, 'a form still arriving holds no turn: the member is served');
  t.notOk(posted, 'while the form is still arriving');
  post.socket.write(body.slice(10));
  t.equal(await post.status, 303, 'the form is taken once it is in');
  t.equal((await gw.admin(`/admin/keys/${key.id}`)).body.name, 'renamed');

  // The credit page's ledger read is held: that request has acme's turn until it is let go.
  let release!: () => void;
  hold = new Promise<void>((r) => (release = r));
  let credit = false;
  const held = fetch(`${gw.url}/console/accounts/acme/credit`, { headers: { cookie: acme } }).then((r) => ((credit = true), r));
  await waitFor(() => holding > 0, 5000, 'the credit page reading the ledger');
  let served = false;
  const mine = page('acme', acme).then((r) => ((served = true), r));
  t.equal((await page('acme', operator)).status, 200, "an operator on the same account's page does not wait");
  t.equal((await page('globex', globex)).status, 200, "another account's member does not wait");
  await sleep(300);
  t.notOk(served || credit, "the member's next page waits its turn behind the credit page");
  hold = undefined;
  release();
  t.equal((await held).status, 200, 'the credit page is served');
  t.equal((await mine).status, 200, 'then the next page');
});

t.test("a ledger download whose reader stalls holds no turn: the member's pages are served meanwhile", async (t) => {
  // ~6 MB of CSV, more than the loopback socket's buffers hold: the download waits for its reader.
  const note = 'n'.repeat(500);
  for (let i = 0; i < 12_000; i += 500)
    await Promise.all(Array.from({ length: 500 }, (_, j) => gw.store.grant('acme', 1, `g${i + j}`, note, new Date().toISOString())));
  const download = raw(`GET /console/accounts/acme/ledger.csv HTTP/1.1\r\nhost: ${new URL(gw.url).host}\r\ncookie: ${acme}\r\n\r\n`);
  t.teardown(() => download.socket.destroy());
  t.equal(await download.status, 200, 'the download started'); // and is not read past its first chunk
  await sleep(300);
  for (let i = 0; i < 3; i++) t.equal((await page('acme', acme)).status, 200, `page ${i + 1} served while the download waits`);
  // Read it all: the rest of the ledger still comes, in order, to the last entry.
  let text = await download.first;
  download.socket.setEncoding('utf8');
  download.socket.on('data', (s: string) => (text += s));
  download.socket.resume();
  await new Promise<void>((resolve) => {
    const check = () => (text.includes('\r\n0\r\n\r\n') ? resolve() : setTimeout(check, 20));
    check();
  });
  t.equal(text.split(note).length - 1, 12_000, 'every grant is in the download');
});

t.test('a download cancelled while its next page is read ends there: logged, its turn free, nothing left waiting', async (t) => {
  // More than a page of entries (the test above made 12,000; these make the file stand alone too).
  await Promise.all(Array.from({ length: 1_001 }, (_, i) => gw.store.grant('acme', 1, `c${i}`, undefined, new Date().toISOString())));
  const lines = () =>
    gw.logs.filter((l) => l.includes('"msg":"request"') && l.includes('/ledger.csv') && l.includes('"status":200')).length;
  const before = lines();
  let release!: () => void;
  holdPages = new Promise<void>((r) => (release = r));
  const download = raw(`GET /console/accounts/acme/ledger.csv HTTP/1.1\r\nhost: ${new URL(gw.url).host}\r\ncookie: ${acme}\r\n\r\n`);
  t.equal(await download.status, 200);
  download.socket.resume();
  await waitFor(() => holdingPages > 0, 5000, 'the second page being read');
  download.socket.destroy(); // the member cancels the download
  await sleep(200);
  holdPages = undefined;
  release();
  const logged = () => lines() > before;
  await waitFor(logged, 5000, "the download's request line");
  t.ok(logged(), 'the request ended and was logged');
  t.equal((await page('acme', acme)).status, 200, "the account's turn is free");
});
