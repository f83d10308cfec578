/**
 * Credit administration independent of HTTP (SPEC §2, §4): grants, balances and ledger reads. The JSON
 * admin API (accounts.ts) and the console (console/routes.ts) are two front doors onto these calls.
 */
import { invalid } from '../http/errors.ts';
import { MAX_BALANCE_MICROS, type AccountState, type ExportState, type GrantResult, type LedgerEntry, type Store } from '../store/types.ts';

export interface AccountService {
  /**
   * Credits (negative: corrects) the account; a repeated idempotency key credits nothing and returns the
   * first entry. A grant that would take the balance past ±MAX_BALANCE_MICROS credits nothing: 422 on
   * `body.amount_micros`.
   */
  grant(account: string, amountMicros: number, idempotencyKey: string | undefined, note: string | undefined): Promise<GrantResult>;
  show(account: string): Promise<AccountState>;
  /** Entries oldest first, strictly after `after`. */
  ledger(account: string, after: string | undefined, limit: number): Promise<LedgerEntry[]>;
  /** Entries newest first, strictly before `before`. */
  recent(account: string, before: string | undefined, limit: number): Promise<LedgerEntry[]>;
  /** How far the ledger was exported, and before which entry it was trimmed (SPEC §10). */
  exportState(account: string): Promise<ExportState>;
}

export function createAccountService(d: { store: Store; now: () => number }): AccountService {
  return {
    async grant(account, amount, idem, note) {
      const r = await d.store.grant(account, amount, idem, note || undefined, new Date(d.now()).toISOString());
      if (r.outOfRange) {
        throw invalid(
          ['body', 'amount_micros'],
          'value_error',
          `Value error, the balance (${r.balance_micros} micro-credits) would pass ±${MAX_BALANCE_MICROS}; nothing was credited`,
          amount,
          { balance_micros: r.balance_micros, max_balance_micros: MAX_BALANCE_MICROS },
        );
      }
      return r;
    },
    show: (account) => d.store.getAccount(account),
    ledger: (account, after, limit) => d.store.ledger(account, after, limit),
    recent: (account, before, limit) => d.store.ledgerBefore(account, before, limit),
    exportState: (account) => d.store.exportState(account),
  };
}
