// Shared by the ledger export tests: a Redis store and an S3 sink on the test servers, and the check that
// every ledger entry of some accounts is in exactly one exported object, complete and where it belongs.
import type { Test } from 'tap';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { LedgerEntry, Store } from '../../src/store/types.ts';
import { createS3Sink, type LedgerSink } from '../../src/ledger/sink.ts';
import { decodeObject, entryDay, type ExportedEntry } from '../../src/ledger/entries.ts';
import type { TestS3 } from '../helpers/s3.ts';

export const PREFIX = 'ledger/';

export async function openRedisStore(t: Test, url: string): Promise<Store> {
  const store = await createRedisStore({ url, commandTimeoutMs: 2000, settledTtlSeconds: 3600 });
  t.teardown(() => store.close());
  return store;
}

export function sinkFor(s3: TestS3): LedgerSink {
  return createS3Sink({
    endpoint: s3.endpoint,
    region: 'us-east-1',
    bucket: s3.bucket,
    forcePathStyle: true,
    accessKeyId: s3.accessKeyId,
    secretAccessKey: s3.secretAccessKey,
  });
}

/** Every line of every object under `prefix`, with the object it came from. */
export async function exportedLines(sink: LedgerSink, prefix = PREFIX): Promise<{ key: string; entry: ExportedEntry; line: number }[]> {
  const out: { key: string; entry: ExportedEntry; line: number }[] = [];
  for (const key of await sink.list(prefix)) {
    (await decodeObject(await sink.get(key))).forEach((entry, line) => out.push({ key, entry, line }));
  }
  return out;
}

/**
 * SPEC §10: each entry of `ledgers` (account → its full ledger, read before any trim) is in exactly one
 * object, equal field for field plus `account`; each object sits under its entries' day and account and is
 * named by its first entry; nothing else was exported.
 */
export async function checkExactlyOnce(t: Test, sink: LedgerSink, ledgers: Map<string, LedgerEntry[]>): Promise<void> {
  const lines = await exportedLines(sink);
  const seen = new Map<string, number>();
  for (const { entry } of lines) seen.set(`${entry.account}/${entry.id}`, (seen.get(`${entry.account}/${entry.id}`) ?? 0) + 1);
  let expected = 0;
  const missing: string[] = [];
  const twice: string[] = [];
  const wrong: string[] = [];
  const byKey = new Map(lines.map((l) => [`${l.entry.account}/${l.entry.id}`, l.entry]));
  for (const [account, entries] of ledgers) {
    for (const e of entries) {
      expected++;
      const n = seen.get(`${account}/${e.id}`) ?? 0;
      if (n === 0) missing.push(`${account}/${e.id}`);
      if (n > 1) twice.push(`${account}/${e.id}`);
      const got = byKey.get(`${account}/${e.id}`);
      if (got && JSON.stringify(got) !== JSON.stringify({ ...e, account })) wrong.push(`${account}/${e.id}`);
    }
  }
  t.same(missing, [], 'no entry is missing from the objects');
  t.same(twice, [], 'no entry is in two objects (or twice in one)');
  t.same(wrong, [], 'every exported line is the entry, field for field, plus account');
  t.equal(lines.length, expected, `${expected} lines in all: nothing but these entries was exported`);
  const misplaced = lines.filter(
    ({ key, entry }) => !key.startsWith(`${PREFIX}dt=${entryDay(entry)}/${encodeURIComponent(entry.account)}/`),
  );
  t.same(
    misplaced.map((l) => l.key),
    [],
    'every line sits under its day (dt=) and account',
  );
  const firsts = lines.filter((l) => l.line === 0).every(({ key, entry }) => key.endsWith(`/${entry.id}.ndjson.gz`));
  t.ok(firsts, 'every object is named by its first entry');
}
