// Contract cases for records and messages: key records, shares and invalidations (SPEC §1.1, §1.4, §5).
import { randomBytes } from 'node:crypto';
import type { Test } from 'tap';
import type { Invalidation, KeyRecord, ShareRecord, Store } from '../../src/store/types.ts';
import { TS, TS2, uniqueAccount, waitFor, type Harness } from './harness.ts';
import { keyRecord as keyControlsRecord } from './contract-key-controls.ts';

type Case = (name: string, fn: (t: Test, h: Harness) => Promise<void>) => void;
type MakePeer = (t: Test, store: Store) => Promise<Store>;

/** contract-key-controls' key record, with the chat, models and shares scopes unless `extra` says otherwise. */
function keyRecord(id: string, account: string, extra: Partial<KeyRecord> = {}): KeyRecord {
  return keyControlsRecord(id, account, { scopes: ['chat', 'models', 'shares'], ...extra });
}

const byId = (a: KeyRecord, b: KeyRecord) => a.id.localeCompare(b.id);

/** Registers the key, share and invalidation cases. */
export function recordCases(test: Case, makePeer: MakePeer): void {
  test('key records round-trip exactly and are listed per account', async (t, { store }) => {
    const a = uniqueAccount();
    const b = uniqueAccount();
    const k1 = keyRecord('key_AAAAAAAAAAAAAAA1', a, { scopes: ['chat'], models: ['gpt-test', 'llama-3'], env: 'test' });
    const k2 = keyRecord('key_AAAAAAAAAAAAAAA2', a, { rate_limits: { requests_per_minute: 5, tokens_per_minute: 1000 }, created_at: TS2 });
    const k3 = keyRecord('key_AAAAAAAAAAAAAAA3', b, { active: false, rate_limits: { tokens_per_minute: 7 }, version: 4 });
    await store.createKey('hash-1', k1);
    await store.createKey('hash-2', k2);
    await store.createKey('hash-3', k3);
    t.strictSame(await store.getKeyByHash('hash-1'), k1, 'scopes, models and null rate_limits survive');
    t.strictSame(await store.getKeyByHash('hash-2'), k2, 'an override object survives');
    t.strictSame(await store.getKeyByHash('hash-3'), k3, 'inactive and version survive');
    t.strictSame(await store.getKey(k2.id), { record: k2, hash: 'hash-2' });
    t.equal(await store.getKeyByHash('hash-unknown'), null);
    t.equal(await store.getKey('key_unknown0000000'), null);
    t.strictSame((await store.listKeys(a)).sort(byId), [k1, k2]);
    t.strictSame(await store.listKeys(b), [k3], 'other accounts are not listed');
    t.strictSame(await store.listKeys(uniqueAccount('nobody')), []);
    const read = await store.getKeyByHash('hash-1');
    read?.models.push('mutated');
    t.strictSame(await store.getKeyByHash('hash-1'), k1, 'a returned record is a copy');
  });

  test('createKey caps an account at maxPerAccount atomically; disabled keys count; other accounts unaffected', async (t, { store }) => {
    const a = uniqueAccount();
    const b = uniqueAccount();
    const held = (maxPerAccount: number) => ({ maxPerAccount });
    const made = await Promise.all(
      Array.from({ length: 12 }, (_, i) => store.createKey(`hash-cap-${a}-${i}`, keyRecord(`key_CAP${a}${i}`, a), held(5))),
    );
    t.equal(made.filter((m) => m === 'created').length, 5, 'exactly the cap, concurrent creates included');
    t.equal((await store.listKeys(a)).length, 5, 'refused creates stored nothing');
    const refusedIndex = made.indexOf('held_cap');
    t.equal(await store.getKeyByHash(`hash-cap-${a}-${refusedIndex}`), null, 'a refused record is not readable by its hash');
    await store.updateKey((await store.listKeys(a))[0]!.id, { active: false });
    t.equal(await store.createKey(`hash-cap-${a}-x`, keyRecord(`key_CAP${a}x`, a), held(5)), 'held_cap', 'a disabled key still counts');
    t.equal(await store.createKey(`hash-cap-${a}-y`, keyRecord(`key_CAP${a}y`, a), held(6)), 'created', 'a higher cap makes room');
    t.equal(await store.createKey(`hash-cap-${b}`, keyRecord(`key_CAP${b}`, b), held(1)), 'created', 'the cap is per account');
    t.equal(await store.createKey(`hash-cap-${a}-z`, keyRecord(`key_CAP${a}z`, a)), 'created', 'no cap given: no cap');
    const count = (await store.listKeys(a)).length;
    t.equal(await store.createKey(`hash-cap-${a}-w`, keyRecord(`key_CAP${a}w`, a), held(count)), 'held_cap', 'at the cap again');
    await store.deleteKey((await store.listKeys(a))[0]!.id);
    t.equal(await store.createKey(`hash-cap-${a}-w`, keyRecord(`key_CAP${a}w`, a), held(count)), 'created', 'a deleted key frees its slot');
  });

  test('createKey bounds the keys an account makes per UTC day atomically; deleting makes no room; the next day does', async (t, {
    store,
  }) => {
    // SPEC §13 "bounds keys made": each key id made writes usage cells kept usage.retention_days, so
    // creating, using and deleting keys in a loop (the held cap never reached) must run out too.
    const a = uniqueAccount();
    const b = uniqueAccount();
    const perDay = (maxMadePerDay: number, maxPerAccount?: number) => ({ maxMadePerDay, maxPerAccount });
    const made = await Promise.all(
      Array.from({ length: 12 }, (_, i) => store.createKey(`hash-day-${a}-${i}`, keyRecord(`key_DAY${a}${i}`, a), perDay(5, 100))),
    );
    t.equal(made.filter((m) => m === 'created').length, 5, 'exactly the bound, concurrent creates included');
    t.equal(made.filter((m) => m === 'daily_cap').length, 7, 'every other create refused at the daily bound, not the held cap');
    t.equal(await store.getKeyByHash(`hash-day-${a}-${made.indexOf('daily_cap')}`), null, 'a refused record is not stored');
    for (const k of await store.listKeys(a)) await store.deleteKey(k.id);
    t.strictSame(await store.listKeys(a), [], 'the account holds no key');
    t.equal(
      await store.createKey(`hash-day-${a}-x`, keyRecord(`key_DAY${a}x`, a), perDay(5, 100)),
      'daily_cap',
      'deleted keys still count',
    );
    t.equal(await store.createKey(`hash-day-${a}-y`, keyRecord(`key_DAY${a}y`, a), perDay(6)), 'created', 'a higher bound makes room');
    t.equal(await store.createKey(`hash-day-${a}-z`, keyRecord(`key_DAY${a}z`, a)), 'created', 'no bound given: no bound');
    t.equal(
      await store.createKey(`hash-day-${a}-v`, keyRecord(`key_DAY${a}v`, a), perDay(7)),
      'daily_cap',
      'a key made with no bound was counted all the same',
    );
    const tomorrow = { created_at: '2026-11-23T00:00:01.000Z' };
    t.equal(
      await store.createKey(`hash-day-${a}-t`, keyRecord(`key_DAY${a}t`, a, tomorrow), perDay(5)),
      'created',
      'the next UTC day counts afresh',
    );
    t.equal(await store.createKey(`hash-day-${b}`, keyRecord(`key_DAY${b}`, b), perDay(1)), 'created', 'the bound is per account');
    t.equal(await store.createKey(`hash-day-${b}-2`, keyRecord(`key_DAY${b}2`, b), perDay(1)), 'daily_cap');

    // A create refused at the held cap is not counted as made; the held cap is checked first.
    const c = uniqueAccount();
    t.equal(await store.createKey(`hash-day-${c}-1`, keyRecord(`key_DAY${c}1`, c), perDay(2, 1)), 'created');
    for (let i = 0; i < 3; i++)
      t.equal(await store.createKey(`hash-day-${c}-r${i}`, keyRecord(`key_DAY${c}r${i}`, c), perDay(2, 1)), 'held_cap', 'at the held cap');
    await store.deleteKey(`key_DAY${c}1`);
    t.equal(await store.createKey(`hash-day-${c}-2`, keyRecord(`key_DAY${c}2`, c), perDay(2, 1)), 'created', 'refusals made nothing');
    await store.deleteKey(`key_DAY${c}2`);
    t.equal(await store.createKey(`hash-day-${c}-3`, keyRecord(`key_DAY${c}3`, c), perDay(2, 1)), 'daily_cap', 'two made today');
  });

  test('updateKey applies the patch and bumps the version', async (t, { store }) => {
    const acct = uniqueAccount();
    const k = keyRecord('key_BBBBBBBBBBBBBBB1', acct);
    await store.createKey('hash-b1', k);
    const renamed = await store.updateKey(k.id, { name: 'renamed' });
    t.strictSame(renamed, { record: { ...k, name: 'renamed', version: 2 }, hash: 'hash-b1' });
    const disabled = await store.updateKey(k.id, { active: false, rate_limits: { requests_per_minute: 3 } });
    t.strictSame(disabled?.record, { ...k, name: 'renamed', active: false, rate_limits: { requests_per_minute: 3 }, version: 3 });
    const cleared = await store.updateKey(k.id, { active: true, rate_limits: null });
    t.strictSame(cleared?.record, { ...k, name: 'renamed', version: 4 }, 'rate_limits back to null');
    t.equal((await store.updateKey(k.id, {}))?.record.version, 5, 'an empty patch still bumps the version');
    t.strictSame(await store.getKeyByHash('hash-b1'), { ...k, name: 'renamed', version: 5 }, 'the update is stored');
    t.strictSame(await store.getKey(k.id), { record: { ...k, name: 'renamed', version: 5 }, hash: 'hash-b1' });
    t.equal(await store.updateKey('key_unknown0000000', { name: 'x' }), null, 'unknown id → null');
  });

  test('updateKey replaces the scopes; later patches keep them', async (t, { store }) => {
    const k = keyRecord('key_BBBBBBBBBBBBBBB2', uniqueAccount());
    await store.createKey('hash-b2', k);
    const granted = await store.updateKey(k.id, { scopes: ['chat', 'embeddings'] });
    t.strictSame(granted?.record, { ...k, scopes: ['chat', 'embeddings'], version: 2 });
    const renamed = await store.updateKey(k.id, { name: 'still scoped' });
    t.strictSame(renamed?.record.scopes, ['chat', 'embeddings'], 'a patch without scopes leaves them');
    t.strictSame((await store.getKeyByHash('hash-b2'))?.scopes, ['chat', 'embeddings'], 'stored');
  });

  test('share records round-trip (no snapshot: it is an object); revoke leaves a tombstone, revoked_at set once', async (t, { store }) => {
    const share: ShareRecord = {
      slug: 'A1b2C3d4E5f6G7h8J9k1m2',
      account: uniqueAccount(),
      created_at: TS,
      bytes: 524_288,
      files: [
        { name: 'chart 📈.png', content_type: 'image/png', size: 12345 },
        { name: 'notes.txt', content_type: 'text/plain', size: 0 },
      ],
      revoked_at: null,
    };
    const bare: ShareRecord = { ...share, slug: 'Z1b2C3d4E5f6G7h8J9k1m2', bytes: 2, files: [] };
    await store.putShare(share);
    await store.putShare(bare);
    const read = await store.getShare(share.slug);
    // Redis keeps only the number of files (the list is an object, written by the share service: SPEC §13
    // "Redis holds no user content"); the embedded store keeps the list in its record.
    const { files: _list, ...rest } = share;
    const held: ShareRecord = store.kind === 'memory' ? share : { ...rest, file_count: 2 };
    t.strictSame(read, held);
    t.equal(read?.snapshot, undefined, 'a record never holds the snapshot text');
    await store.putShare({ ...bare, slug: 'Y1b2C3d4E5f6G7h8J9k1m2', snapshot: '{"big":"text"}' });
    t.equal((await store.getShare('Y1b2C3d4E5f6G7h8J9k1m2'))?.snapshot, undefined, 'not even when handed one');
    t.strictSame(await store.getShare(bare.slug), bare, 'empty file list');
    t.equal(await store.getShare('unknownunknownunknown1'), null);
    t.strictSame(await store.revokeShare(share.slug, TS2), { ...held, revoked_at: TS2 }, 'the record as it was, revoked');
    const tombstone = { ...share, bytes: 0, files: [], revoked_at: TS2 };
    t.strictSame(await store.revokeShare(share.slug, '2026-12-01T00:00:00.000Z'), tombstone, 'second revoke keeps the first time');
    t.strictSame(await store.getShare(share.slug), tombstone, 'a tombstone: account, created_at and revoked_at only');
    t.equal(await store.revokeShare('unknownunknownunknown1', TS2), null);
    t.equal(await store.getShare('unknownunknownunknown1'), null, 'revoking an unknown slug creates nothing');
    t.strictSame(await store.getShare(bare.slug), bare, 'other shares untouched');
  });

  // The orphan sweep puts off an intent it could not finish (shares/janitor.ts): forward only, and never
  // back once cleared, so a create's or revoke's own intent is neither brought forward nor resurrected.
  test('share intents: put off moves one forward only, and never brings a cleared one back', async (t, { store }) => {
    const acct = uniqueAccount();
    const [a, b, c] = ['a', 'b', 'c'].map((x) => ({ slug: (x + randomBytes(11).toString('hex')).slice(0, 22), account: acct }));
    const mine = async (before: number) =>
      (await store.duePendingShares(before, 1_000_000)).filter((p) => p.account === acct).map((p) => p.slug);
    await store.markSharePending(a!, 1_000);
    await store.markSharePending(b!, 2_000);
    t.strictSame(await mine(5_000), [a!.slug, b!.slug], 'oldest first');
    await store.deferSharePending(a!, 3_000);
    t.strictSame(await mine(5_000), [b!.slug, a!.slug], 'a put off behind b');
    t.strictSame(await mine(2_500), [b!.slug], 'and not due before its new time');
    await store.deferSharePending(b!, 1_500);
    t.strictSame(await mine(1_800), [], 'never moved back');
    await store.deferSharePending(c!, 1_000);
    t.strictSame(await mine(5_000), [b!.slug, a!.slug], 'one that is not there is not added');
    await store.clearSharePending(a!);
    await store.clearSharePending(b!);
  });

  test('revoked shares: tombstones that expire with their retention, at most maxPerAccount per account', async (t, { store }) => {
    const acct = uniqueAccount();
    const slug = () => randomBytes(11).toString('hex');
    const limits = { maxCount: 2, maxBytes: 10_000, unfundedMaxCount: 2 };
    const keep = { retentionMs: 60_000, maxPerAccount: 2 };
    const made: ShareRecord[] = [];
    for (let i = 0; i < 6; i++) {
      const r: ShareRecord = {
        slug: slug(),
        account: acct,
        created_at: new Date(Date.parse(TS) + i * 1000).toISOString(),
        bytes: 10,
        files: [{ name: `file ${i}.txt`, content_type: 'text/plain', size: 5 }],
        revoked_at: null,
      };
      t.equal(
        await store.reserveShareQuota(acct, r.slug, 15, limits, Date.parse(r.created_at)),
        'ok',
        `create ${i}: revoked shares gave their quota back`,
      );
      await store.putShare(r);
      await store.revokeShare(r.slug, TS2, keep);
      await store.releaseShareQuota(acct, r.slug, 'revoked', keep);
      made.push(r);
    }
    const states = await Promise.all(made.map((r) => store.getShare(r.slug)));
    t.strictSame(
      states.map((r) => r?.revoked_at ?? null),
      [null, null, null, null, TS2, TS2],
      'the two most recently revoked are remembered (410); the older tombstones are gone (404)',
    );
    t.strictSame(states[5], { ...made[5]!, bytes: 0, files: [], revoked_at: TS2 }, 'a tombstone keeps no files or sizes');
    t.strictSame(
      (await store.listShares(acct, 10)).map((r) => r.slug),
      [made[5]!.slug, made[4]!.slug],
      'the console lists the remembered revoked shares, newest first',
    );
    const live = { ...made[0]!, slug: slug(), revoked_at: null };
    t.equal(await store.reserveShareQuota(acct, live.slug, 15, limits, Date.parse(live.created_at)), 'ok');
    await store.putShare(live);
    t.strictSame(
      (await store.listShares(acct, 10)).map((r) => r.slug),
      [made[5]!.slug, made[4]!.slug, live.slug],
      'live and revoked together, by creation time',
    );

    // The retention: within it a revoked share is a tombstone (410), after it the slug is unknown (404).
    const brief = { retentionMs: 150, maxPerAccount: 10 };
    const r = { ...made[0]!, slug: slug() };
    await store.reserveShareQuota(acct, r.slug, 15, limits, Date.parse(r.created_at));
    await store.putShare(r);
    await store.revokeShare(r.slug, TS2, brief);
    await store.releaseShareQuota(acct, r.slug, 'revoked', brief);
    t.equal((await store.getShare(r.slug))?.revoked_at, TS2, 'revoked within its retention');
    await waitFor(async () => (await store.getShare(r.slug)) === null, 3000, 'the tombstone to expire', 20);
    t.pass('unknown once its retention has passed');
    t.equal(await store.revokeShare(r.slug, TS2, brief), null, 'and cannot be revoked again');
  });

  test('invalidations reach every instance, decoded', async (t, { store }) => {
    const peer = await makePeer(t, store);
    // Fresh names, and only ours counted: on a Cluster an earlier case's publish travels the cluster bus
    // and can reach this case's new subscription late (one CI run saw the revoke case's share message).
    const hash = randomBytes(32).toString('hex');
    const slug = `S${randomBytes(16).toString('base64url').replace(/[-_]/g, 'x').slice(0, 21)}`;
    const ours = (m: Invalidation) => (m.kind === 'key' ? m.hash === hash : m.slug === slug);
    const atPeer: Invalidation[] = [];
    const atSelf: Invalidation[] = [];
    peer.onInvalidation((m) => ours(m) && atPeer.push(m));
    store.onInvalidation((m) => ours(m) && atSelf.push(m));
    const sent: Invalidation[] = [
      { kind: 'key', hash, version: 7 },
      { kind: 'share', slug },
    ];
    for (const m of sent) await store.publish(m);
    await waitFor(() => atPeer.length >= 2 && atSelf.length >= 2, 1000, 'both invalidations on both instances');
    // Each once, in any order: on a Cluster each PUBLISH may enter at another node and reach a subscriber
    // over another bus link (one run saw the share's before the key's). No reader needs the order: a key's
    // invalidation carries its version (the cache keeps the highest), a share's only drops the entry.
    const byKind = (ms: Invalidation[]) => [...ms].sort((a, b) => a.kind.localeCompare(b.kind));
    t.strictSame(byKind(atPeer), sent, 'the other instance got both, once each');
    t.strictSame(byKind(atSelf), sent, 'the publishing instance hears its own messages too');
  });
}
