// The per-account gate (src/limits/account-gate.ts): at most `running` pieces of one account's work at
// once, the rest in order, and past `waiting` in line a 429 before the work starts; other accounts never wait.
import t from 'tap';
import { createAccountGate } from '../../src/limits/account-gate.ts';
import { GatewayError } from '../../src/http/errors.ts';

/** A piece of work that ends when the test says. */
function piece(log: string[], name: string) {
  let end!: () => void;
  const ended = new Promise<void>((r) => (end = r));
  return {
    end,
    fn: async () => {
      log.push(`start ${name}`);
      await ended;
      log.push(`end ${name}`);
      return name;
    },
  };
}
const turn = () => new Promise((r) => setImmediate(r));

t.test('one at a time per account, in order; another account runs at once', async (t) => {
  const gate = createAccountGate({ running: 1, waiting: 2 });
  const log: string[] = [];
  const [a1, a2, a3, b1] = ['a1', 'a2', 'a3', 'b1'].map((n) => piece(log, n));
  const runs = [gate.run('a', a1!.fn), gate.run('a', a2!.fn), gate.run('a', a3!.fn), gate.run('b', b1!.fn)];
  await turn();
  t.same(log, ['start a1', 'start b1'], 'a2 and a3 wait; b is not behind a');
  t.same(gate.load('a'), { running: 1, waiting: 2 });
  a1!.end();
  await turn();
  t.same(log.slice(2), ['end a1', 'start a2'], 'the next in line starts when one ends');
  a3!.end(); // its end changes nothing until it has started
  a2!.end();
  b1!.end();
  t.same(await Promise.all(runs), ['a1', 'a2', 'a3', 'b1']);
  t.same(
    log.filter((l) => l.startsWith('start ')),
    ['start a1', 'start b1', 'start a2', 'start a3'],
  );
  t.same(gate.load('a'), { running: 0, waiting: 0 }, 'nothing left behind');
});

t.test('past the line: 429 before the work runs; an admitted piece waits whatever the line', async (t) => {
  const gate = createAccountGate({ running: 1, waiting: 1 });
  const log: string[] = [];
  const [x, y, z] = ['x', 'y', 'z'].map((n) => piece(log, n));
  const first = gate.run('a', x!.fn);
  const second = gate.run('a', y!.fn);
  let ran = false;
  const refused = await gate
    .run('a', async () => {
      ran = true;
    })
    .catch((e: unknown) => e);
  t.ok(refused instanceof GatewayError && refused.code === 'concurrency_limit_exceeded' && refused.status === 429, 'refused with 429');
  t.equal((refused as GatewayError).headers?.['retry-after'], '1');
  t.notOk(ran, 'the refused work never ran');
  const third = gate.run('a', z!.fn, { admitted: true });
  await turn();
  t.same(gate.load('a'), { running: 1, waiting: 2 }, 'the admitted piece is in line past the bound');
  x!.end();
  y!.end();
  z!.end();
  t.same(await Promise.all([first, second, third]), ['x', 'y', 'z']);
});

t.test('a piece that throws frees its slot', async (t) => {
  const gate = createAccountGate({ running: 1, waiting: 4 });
  const failed = gate.run('a', async () => {
    throw new Error('boom');
  });
  const next = gate.run('a', async () => 'next');
  await t.rejects(failed, /boom/);
  t.equal(await next, 'next');
  t.same(gate.load('a'), { running: 0, waiting: 0 });
});
