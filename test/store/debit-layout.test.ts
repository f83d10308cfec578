// store.debit_entries (docs/ledger.md "Debit entries"): with `fields`, no script that writes a debit may
// keep a compact XADD, and a compact XADD the rewrite does not recognise stops the startup.
import { readdir, readFile } from 'node:fs/promises';
import t from 'tap';
import { settleScriptFor } from '../../src/store/debit-layout.ts';

const dir = new URL('../../src/store/lua/', import.meta.url);
const files = (await readdir(dir)).filter((f) => f.endsWith('.lua'));
const compactXadds = (lua: string) => lua.split('\n').filter((l) => /XADD/.test(l) && /'d',/.test(l));

t.test('fields: every compact debit XADD of every script is rewritten', async (t) => {
  let rewritten = 0;
  for (const f of files) {
    const lua = await readFile(new URL(f, dir), 'utf8');
    t.equal(settleScriptFor(lua, 'compact'), lua, `${f}: compact leaves the script as it is`);
    const out = settleScriptFor(lua, 'fields');
    t.strictSame(compactXadds(out), [], `${f}: no compact XADD left`);
    const n = compactXadds(lua).length;
    if (n === 0) t.equal(out, lua, `${f}: writes no debit, unchanged`);
    else t.equal(out.split('tgDebitFields(').length - 2, n, `${f}: each of its ${n} compact XADDs calls the field writer`);
    rewritten += n;
  }
  // settle, settle-many, run, and lease-settle's two (its common path's hold is an argument, not `hold`).
  t.ok(rewritten >= 5, `${rewritten} compact XADDs found and rewritten`);
});

t.test('the rewrite keeps the hold expression, whatever it is', async (t) => {
  const out = settleScriptFor("local x = call('XADD', lk, '*', 'd', ARGV[dd + i], 'h', ARGV[dh + i])\n", 'fields');
  t.match(out, 'local x = tgDebitFields(lk, ARGV[dd + i], ARGV[dh + i])');
});

t.test('a compact XADD the rewrite does not recognise fails loudly', async (t) => {
  for (const lua of [
    `local id = redis.call("XADD", KEYS[3], "*", "d", ARGV[3], "h", hold)`,
    `local id = redis.call('XADD', KEYS[3], '*',\n  'd', ARGV[3], 'h', hold)`,
    `local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', 1000, '*', 'd', ARGV[3], 'h', hold)`,
  ]) {
    t.throws(() => settleScriptFor(lua, 'fields'), /compact debit XADD not rewritten/, lua);
  }
});
