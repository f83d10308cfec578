// Key budget periods (docs/keys.md): UTC day and calendar month tags and ends, across month and year ends.
import t from 'tap';
import { budgetCharge, COUNTER_GRACE_MS, periodOf } from '../../src/credit/budget.ts';

t.test('periods are UTC days and calendar months', async (t) => {
  const at = Date.parse('2026-12-31T23:59:59.999Z');
  t.same(periodOf('day', at), { tag: 'd2026-12-31', endsAtMs: Date.parse('2027-01-01T00:00:00.000Z') });
  t.same(periodOf('month', at), { tag: 'm2026-12', endsAtMs: Date.parse('2027-01-01T00:00:00.000Z') });
  t.same(periodOf('day', at + 1), { tag: 'd2027-01-01', endsAtMs: Date.parse('2027-01-02T00:00:00.000Z') });
  t.same(periodOf('month', Date.parse('2028-02-29T12:00:00Z')), { tag: 'm2028-02', endsAtMs: Date.parse('2028-03-01T00:00:00Z') });
  t.same(periodOf('total', at), { tag: 't', endsAtMs: null });
  // A local-time zone must not matter: tags come from UTC fields only.
  t.equal(periodOf('day', Date.parse('2026-11-25T23:30:00-05:00')).tag, 'd2026-11-26');
});

t.test('a charge carries the key, the tag, the limit and the counter expiry', async (t) => {
  const at = Date.parse('2026-11-25T10:00:00Z');
  t.same(budgetCharge('key_x', { limit_micros: 5, period: 'month' }, at), {
    keyId: 'key_x',
    period: 'm2026-11',
    limitMicros: 5,
    expireAtMs: Date.parse('2026-12-01T00:00:00Z') + COUNTER_GRACE_MS,
  });
  t.equal(budgetCharge('key_x', { limit_micros: 5, period: 'total' }, at).expireAtMs, null);
});
