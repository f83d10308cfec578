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
