// Requests in flight per key and per account (src/limits/concurrency.ts): each limit refuses with 429
// naming its scope, a slot is given back when the response closes, and a response that closed before
// the slot was taken (a client gone during authentication) does not keep it.
import t from 'tap';
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { createConcurrency } from '../../src/limits/concurrency.ts';
import { GatewayError } from '../../src/http/errors.ts';

const res = (destroyed = false) => Object.assign(new EventEmitter(), { destroyed }) as unknown as ServerResponse;

function refusal(f: () => void): GatewayError {
  try {
    f();
  } catch (e) {
    return e as GatewayError;
  }
  throw new Error('expected a refusal');
}

t.test('per key and per account, each 429 naming its scope; slots come back on close', async (t) => {
  const c = createConcurrency(2, 3);
  const a1 = res();
  c.enter('k1', 'acct', a1);
  c.enter('k1', 'acct', res());
  const byKey = refusal(() => c.enter('k1', 'acct', res()));
  t.equal(byKey.code, 'concurrency_limit_exceeded');
  t.equal(byKey.headers?.['x-ratelimit-scope'], 'key');
  c.enter('k2', 'acct', res());
  const byAccount = refusal(() => c.enter('k3', 'acct', res()));
  t.equal(byAccount.headers?.['x-ratelimit-scope'], 'account');
  t.match(byAccount.message, /account already has 3 requests/);
  c.enter('k4', 'other', res());
  t.equal(c.inFlightAccount('acct'), 3);
  (a1 as unknown as EventEmitter).emit('close');
  (a1 as unknown as EventEmitter).emit('close');
  t.equal(c.inFlight('k1'), 1, 'one close, one slot, however often it is emitted');
  t.equal(c.inFlightAccount('acct'), 2);
  c.enter('k3', 'acct', res());
});

t.test('a response already closed gives its slot back at once', async (t) => {
  const c = createConcurrency(1, 1);
  c.enter('k', 'a', res(true));
  t.equal(c.inFlight('k'), 0);
  t.equal(c.inFlightAccount('a'), 0);
  c.enter('k', 'a', res());
  t.equal(c.inFlight('k'), 1);
});

t.test('hold: a slot passed on to work that outlives its request counts for the key and the account until it settles', async (t) => {
  const c = createConcurrency(2, 3);
  const r1 = res();
  c.enter('k1', 'acct', r1);
  // The request ends (its client left) while its upstream attempt still waits in the pool's queue.
  (r1 as unknown as EventEmitter).emit('close');
  let unqueue!: () => void;
  c.hold('k1', 'acct', new Promise<void>((r) => (unqueue = r)));
  let fail!: (e: Error) => void;
  c.hold('k2', 'acct', new Promise<void>((_, rej) => (fail = rej)));
  t.equal(c.inFlight('k1'), 1);
  t.equal(c.inFlightAccount('acct'), 2);
  c.enter('k1', 'acct', res());
  t.equal(refusal(() => c.enter('k1', 'acct', res())).headers?.['x-ratelimit-scope'], 'key', 'the held slot counts for the key');
  t.equal(refusal(() => c.enter('k3', 'acct', res())).headers?.['x-ratelimit-scope'], 'account', 'and for the account');
  // Past the limits: what it counts is already there, so a hold never refuses.
  c.hold('k1', 'acct', new Promise<void>(() => {}));
  t.equal(c.inFlight('k1'), 3);
  unqueue();
  fail(new Error('pool destroyed'));
  await new Promise((r) => setImmediate(r));
  t.equal(c.inFlight('k1'), 2, 'given back once the work lets go');
  t.equal(c.inFlight('k2'), 0, 'a rejection gives it back too');
  t.equal(c.inFlightAccount('acct'), 2);
});
