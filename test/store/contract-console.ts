// Contract cases for the console's records (SPEC §9): single-use sign-in tokens, sessions that expire
// and end per account (revoking the account's tokens stored before), the operator's account list, the
// ledger newest first, and an account's shares.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Test } from 'tap';
import type { ShareRecord } from '../../src/store/types.ts';
import { keyRecordOf, TS, TS2, uniqueAccount, type Harness } from './harness.ts';

type Case = (name: string, fn: (t: Test, h: Harness) => Promise<void>) => void;

const session = (account: string | null) => ({ account, created_at: TS, expires_at: TS2 });

/** Registers the console cases. */
export function consoleCases(test: Case): void {
  test('a sign-in token is taken once, and not after it expired', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.putLoginToken('tok-member', { account: acct }, 60);
    await store.putLoginToken('tok-operator', { account: null }, 60);
    await store.putLoginToken('tok-short', { account: acct }, 1);
    t.strictSame(await store.takeLoginToken('tok-member'), { account: acct });
    t.equal(await store.takeLoginToken('tok-member'), null, 'a second take gets nothing');
    t.strictSame(await store.takeLoginToken('tok-operator'), { account: null }, 'operator grant round-trips');
    t.equal(await store.takeLoginToken('tok-unknown'), null);
    await sleep(1100);
    t.equal(await store.takeLoginToken('tok-short'), null, 'expired');
  });

  test('sessions expire, end one by one, and end per account', async (t, { store }) => {
    const a = uniqueAccount();
    const b = uniqueAccount();
    await store.putSession('s-a1', session(a), 60);
    await store.putSession('s-a2', session(a), 60);
    await store.putSession('s-b', session(b), 60);
    await store.putSession('s-op', session(null), 60);
    await store.putSession('s-short', session(a), 1);
    t.strictSame(await store.getSession('s-a1'), session(a));
    t.strictSame(await store.getSession('s-op'), session(null));
    t.equal(await store.getSession('s-unknown'), null);
    await store.deleteSession('s-a2');
    t.equal(await store.getSession('s-a2'), null, 'ended');
    await sleep(1100);
    t.equal(await store.getSession('s-short'), null, 'expired');
    t.equal(await store.deleteAccountSessions(a), 1, "only a's live session counted");
    t.equal(await store.getSession('s-a1'), null, "a's sessions ended");
    t.strictSame(await store.getSession('s-b'), session(b), 'other accounts untouched');
    t.strictSame(await store.getSession('s-op'), session(null), 'operator sessions untouched');
    t.equal(await store.deleteAccountSessions(a), 0, 'nothing left');
  });

  test("ending an account's sessions revokes its tokens stored before, not those stored after", async (t, { store }) => {
    const a = uniqueAccount();
    const b = uniqueAccount();
    await store.putLoginToken(`before-${a}`, { account: a }, 60);
    await store.putLoginToken(`before-${b}`, { account: b }, 60);
    await store.putLoginToken(`operator-${a}`, { account: null }, 60);
    await store.putSession(`s-${a}`, session(a), 60);
    t.equal(await store.deleteAccountSessions(a), 1, 'the session is counted, not the tokens');
    await store.putLoginToken(`after-${a}`, { account: a }, 60);
    t.equal(await store.takeLoginToken(`before-${a}`), null, 'stored before the end: revoked');
    t.strictSame(await store.takeLoginToken(`after-${a}`), { account: a }, 'stored after: works');
    t.strictSame(await store.takeLoginToken(`before-${b}`), { account: b }, "another account's token works");
    t.strictSame(await store.takeLoginToken(`operator-${a}`), { account: null }, 'an operator token works');
    await store.putLoginToken(`second-${a}`, { account: a }, 60);
    await store.deleteAccountSessions(a);
    t.equal(await store.takeLoginToken(`second-${a}`), null, 'the next end revokes what was stored since the first');
    await store.putLoginToken(`third-${a}`, { account: a }, 60);
    t.strictSame(await store.takeLoginToken(`third-${a}`), { account: a }, 'and what comes after it works');
  });

  test('accounts with keys or a ledger are listed, filtered and capped', async (t, { store }) => {
    const tag = uniqueAccount('Zeta');
    const withKey = `${tag}-keys`;
    const withCredit = `${tag}-credit`;
    const other = uniqueAccount('other');
    await store.createKey(`hash-${withKey}`, keyRecordOf(withKey, `key_${tag}`.slice(0, 20)));
    await store.grant(withCredit, 5, undefined, undefined, TS);
    await store.grant(other, 5, undefined, undefined, TS);
    t.strictSame(await store.listAccounts(tag.toLowerCase(), 10), [withCredit, withKey], 'case-insensitive, sorted');
    t.strictSame(await store.listAccounts(tag, 1), [withCredit], 'capped at the limit');
    const all = await store.listAccounts('', 1000);
    t.ok(all.includes(other) && all.includes(withKey), 'an empty search lists every account');
    t.strictSame(await store.listAccounts('no-such-account-anywhere', 10), []);
  });

  test('the ledger reads newest first, page by page', async (t, { store }) => {
    const acct = uniqueAccount();
    const ids: string[] = [];
    for (let i = 1; i <= 5; i++) ids.push((await store.grant(acct, i, undefined, `n${i}`, TS)).entry_id);
    const first = await store.ledgerBefore(acct, undefined, 2);
    t.strictSame(
      first.map((e) => e.note),
      ['n5', 'n4'],
    );
    t.equal(first[0]!.amount_micros, 5, 'entries are parsed like the forward read');
    const second = await store.ledgerBefore(acct, first.at(-1)!.id, 2);
    t.strictSame(
      second.map((e) => e.note),
      ['n3', 'n2'],
    );
    const last = await store.ledgerBefore(acct, second.at(-1)!.id, 2);
    t.strictSame(
      last.map((e) => e.id),
      [ids[0]],
    );
    t.strictSame(await store.ledgerBefore(acct, ids[0], 2), [], 'nothing before the first entry');
    t.strictSame(await store.ledgerBefore(uniqueAccount('nobody'), undefined, 10), []);
  });

  test("an account's shares are listed newest first, revoked ones included", async (t, { store }) => {
    const acct = uniqueAccount();
    const share = (slug: string, created_at: string): ShareRecord => ({
      slug,
      account: acct,
      created_at,
      bytes: 13,
      files: [],
      revoked_at: null,
    });
    // As a create does it: counted (the account's index, which the list reads), then the record.
    const limits = { maxCount: 10, maxBytes: 1000, unfundedMaxCount: 10 };
    const put = async (r: ShareRecord) => {
      await store.reserveShareQuota(r.account, r.slug, r.bytes, limits, Date.parse(r.created_at));
      await store.putShare(r);
    };
    const older = share('C1b2C3d4E5f6G7h8J9k1m2', TS);
    const newer = share('D1b2C3d4E5f6G7h8J9k1m2', TS2);
    await put(older);
    await put(newer);
    await put({ ...share('E1b2C3d4E5f6G7h8J9k1m2', TS2), account: uniqueAccount('other') });
    await store.revokeShare(older.slug, TS2);
    await store.releaseShareQuota(acct, older.slug, 'revoked');
    t.strictSame(await store.listShares(acct, 10), [newer, { ...older, bytes: 0, revoked_at: TS2 }]);
    t.strictSame(await store.listShares(acct, 1), [newer], 'capped at the limit');
    t.strictSame(await store.listShares(uniqueAccount('nobody'), 10), []);
  });
}
