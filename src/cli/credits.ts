/** `tollgate credits …`: grant (idempotent), show a balance, read the ledger (SPEC §2, §2a, §4). */
import { expectPositionals, optPositiveInt, optString, UsageError } from './args.ts';
import type { CliContext, CommandGroup } from './context.ts';
import { creditsToMicros, formatCredits, parseMicros } from '../credit/money.ts';
import { cell, fields, json, table, tableStream } from './output.ts';
import type { LedgerEntry } from '../store/types.ts';
import { compareIds } from '../ledger/entries.ts';

const G = 'credits';

interface AccountBody {
  id?: string;
  account?: string;
  balance_micros: number;
  held_micros: number;
  entry_id?: string;
}

interface LedgerPage {
  entries: LedgerEntry[];
  next_after: string | null;
  /** Entries before this id were exported and trimmed from Redis: the API no longer returns them. */
  archived_before?: string | null;
}

/**
 * Said on stderr when the listing asked for entries the API no longer holds (SPEC §10: trimmed after
 * export): without it `ledger --all` printed the Redis part as if it were the whole ledger, and a bill or
 * balance check summed from it missed everything older than `ledger.retention_days`.
 */
function archivedNote(ctx: CliContext, account: string, after: string | undefined, page: LedgerPage): void {
  const before = page.archived_before;
  if (!before || (after !== undefined && compareIds(after, before) >= 0)) return;
  const ms = Number(before.split('-')[0]);
  ctx.io.err(
    `note: entries of ${account} before ${before} (${new Date(ms).toISOString()}) were exported to S3 and trimmed from Redis (ledger.retention_days): they are not listed here; read them from the exported objects (docs/ledger-export.md).`,
  );
}

const money = (micros: number) => `${formatCredits(micros)} credits (${micros} micros)`;

function balanceFields(account: string, a: AccountBody): Array<[string, string]> {
  return [
    ['account', account],
    ['balance', money(a.balance_micros)],
    ['held', money(a.held_micros)],
    ['available', money(a.balance_micros - a.held_micros)],
  ];
}

/**
 * The amount of a grant, in credits as a person types them (issue 27: `grant acme 5` once granted 5
 * micro-credits while the console's form took credits): the positional or `--credits` (its older
 * spelling) is decimal credits, converted exactly; `--micros` is the exact integer. Exactly one of them.
 */
function grantAmount(amount: string | undefined, credits: string | undefined, micros: string | undefined): number {
  const given = [amount, credits, micros].filter((v) => v !== undefined);
  if (given.length !== 1) throw new UsageError('give the amount once: <credits> (a decimal, e.g. 5 or 0.25) or --micros N', G);
  try {
    return micros !== undefined ? parseMicros(micros) : creditsToMicros((amount ?? credits)!);
  } catch (e) {
    throw new UsageError((e as Error).message, G);
  }
}

function ledgerPath(account: string, after: string | undefined, limit: number | undefined): string {
  const q = new URLSearchParams();
  if (after !== undefined) q.set('after', after);
  if (limit !== undefined) q.set('limit', String(limit));
  const qs = q.toString();
  return `/admin/accounts/${encodeURIComponent(account)}/ledger${qs ? `?${qs}` : ''}`;
}

function tokens(e: LedgerEntry): string {
  if (e.prompt_tokens === undefined && e.completion_tokens === undefined) return '-';
  return `${e.prompt_tokens ?? '?'}/${e.completion_tokens ?? '?'}${e.usage_source === 'estimated' ? ' (est)' : ''}`;
}

const LEDGER_COLUMNS = ['id', 'ts', 'kind', 'amount_micros', 'model', 'tokens_in/out', 'key_id', 'request_id', 'note'];

function ledgerRow(e: LedgerEntry): string[] {
  return [e.id, e.ts, e.kind, String(e.amount_micros), cell(e.model), tokens(e), cell(e.key_id), cell(e.request_id), cell(e.note)];
}

function printLedger(ctx: CliContext, entries: LedgerEntry[]): void {
  ctx.io.out(table(LEDGER_COLUMNS, entries.map(ledgerRow)));
}

/** The `credits` command group. */
export const creditsGroup: CommandGroup = {
  name: G,
  summary: 'credit: grant, show balances, read the ledger',
  notes: [
    'Amounts are credits (a decimal, converted exactly: 1 credit = 1000000 micros); --micros N gives exact integer micro-credits.',
    'A negative amount is a correction: `tollgate credits grant acme -0.005` or `--micros=-5000`.',
    'Pass --idempotency-key so that re-running a grant (after a timeout, say) cannot credit twice.',
    '`ledger --all` follows next_after until the end; without it, the next cursor is printed on stderr.',
  ],
  commands: {
    grant: {
      args: '<account> (<credits> | --micros N) [--idempotency-key K] [--note T]',
      summary: 'grant credit to an account (negative = correction)',
      options: { credits: { type: 'string' }, micros: { type: 'string' }, 'idempotency-key': { type: 'string' }, note: { type: 'string' } },
      async run(ctx, pos) {
        // The amount is optional as a positional because --micros (or --credits) may give it instead.
        const [account, amountText] = expectPositionals(pos, pos.length >= 2 ? ['account', 'credits'] : ['account'], G);
        const amount_micros = grantAmount(amountText, optString(ctx.values, 'credits'), optString(ctx.values, 'micros'));
        const idem = optString(ctx.values, 'idempotency-key');
        const note = optString(ctx.values, 'note');
        const body = { amount_micros, ...(idem !== undefined && { idempotency_key: idem }), ...(note !== undefined && { note }) };
        const res = await ctx.admin().call('POST', `/admin/accounts/${encodeURIComponent(account!)}/credits`, body);
        const a = res.body as AccountBody;
        const replayed = res.status === 200;
        ctx.io.out(
          ctx.json
            ? json(a)
            : fields([...balanceFields(a.account ?? account!, a), ['entry_id', cell(a.entry_id)], ['replayed', replayed ? 'yes' : 'no']]),
        );
        if (replayed)
          ctx.io.err(
            `note: idempotency key ${JSON.stringify(idem)} was already used: nothing was credited again (original entry ${a.entry_id}).`,
          );
      },
    },
    show: {
      args: '<account>',
      summary: "show an account's balance, held and available credit",
      async run(ctx, pos) {
        const [account] = expectPositionals(pos, ['account'], G);
        const { body } = await ctx.admin().call('GET', `/admin/accounts/${encodeURIComponent(account!)}`);
        ctx.io.out(ctx.json ? json(body) : fields(balanceFields(account!, body as AccountBody)));
      },
    },
    ledger: {
      args: '<account> [--after ID] [--limit N] [--all]',
      summary: "read an account's ledger, oldest first",
      options: { after: { type: 'string' }, limit: { type: 'string' }, all: { type: 'boolean' } },
      async run(ctx, pos) {
        const [account] = expectPositionals(pos, ['account'], G);
        let after = optString(ctx.values, 'after');
        const limit = optPositiveInt(ctx.values, 'limit', G);
        const admin = ctx.admin();
        if (ctx.values.all !== true) {
          const { body } = await admin.call('GET', ledgerPath(account!, after, limit));
          const page = body as LedgerPage;
          archivedNote(ctx, account!, after, page);
          if (ctx.json) return ctx.io.out(json(page));
          printLedger(ctx, page.entries);
          if (page.next_after) ctx.io.err(`more entries: tollgate credits ledger ${account} --after ${page.next_after} (or --all)`);
          return;
        }
        // Printed a page at a time, never gathered: an account keeps ledger.retention_days of entries in
        // Redis (7 days of a busy account: millions), and the whole list held, then formatted, ran the CLI
        // out of memory before it printed a line. --json writes the same object, one entry a line.
        const rows = tableStream(LEDGER_COLUMNS);
        let archived: string | null = null;
        let pending: string | undefined;
        if (ctx.json) ctx.io.out('{\n  "entries": [');
        for (let first = true; ; first = false) {
          const { body } = await admin.call('GET', ledgerPath(account!, after, limit));
          const page = body as LedgerPage;
          if (first) {
            archivedNote(ctx, account!, after, page);
            archived = page.archived_before ?? null;
          }
          if (ctx.json) {
            // Each entry is written once the next one is known, so the last goes out without a comma.
            for (const e of page.entries) {
              if (pending !== undefined) ctx.io.out(`    ${pending},`);
              pending = JSON.stringify(e);
            }
          } else if (first || page.entries.length > 0) ctx.io.out(rows(page.entries.map(ledgerRow)));
          // Stop on a cursor that does not move, so a misbehaving server cannot loop us forever.
          if (!page.next_after || page.next_after === after) break;
          after = page.next_after;
        }
        if (ctx.json && pending !== undefined) ctx.io.out(`    ${pending}`);
        if (ctx.json) ctx.io.out(`  ],\n  "next_after": null,\n  "archived_before": ${JSON.stringify(archived)}\n}`);
      },
    },
  },
};
