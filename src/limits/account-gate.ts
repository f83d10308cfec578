/**
 * One account's work at a time, or a few (SPEC §13): at most `running` pieces of an account's work run
 * at once in this process, the rest wait their turn in the order they came, and past `waiting` in line a
 * piece is refused with 429 `concurrency_limit_exceeded` before it does anything. Used by the console
 * (console/access.ts), whose pages each read and render up to tens of thousands of stored values: a
 * member loading its usage page 16 times at once held every other tenant's requests behind them (a
 * victim's p50 1 → 213 ms on a real gateway), where one at a time costs the others one page's slices.
 * Per process, in memory: the bound is per account and per instance, like limits.max_concurrent_per_account.
 */
import { GatewayError } from '../http/errors.ts';

export interface AccountGate {
  /**
   * Runs `fn` once `account` has a free slot. Throws 429 at once when `waiting` pieces already wait,
   * unless `admitted` (a later part of work already let in, such as the next page of a download, which
   * must not fail half-way: it waits whatever the line).
   */
  run<T>(account: string, fn: () => Promise<T>, o?: { admitted?: boolean }): Promise<T>;
  /** Pieces running and waiting for an account (tests). */
  load(account: string): { running: number; waiting: number };
}

interface Line {
  running: number;
  queue: Array<() => void>;
}

export function createAccountGate(o: { running: number; waiting: number }): AccountGate {
  const lines = new Map<string, Line>();

  function release(account: string, line: Line): void {
    const next = line.queue.shift();
    if (next) next();
    else if (--line.running === 0) lines.delete(account);
  }

  return {
    async run(account, fn, opts) {
      let line = lines.get(account);
      if (!line) lines.set(account, (line = { running: 0, queue: [] }));
      if (line.running < o.running) line.running++;
      else {
        if (line.queue.length >= o.waiting && !opts?.admitted)
          throw new GatewayError(
            'concurrency_limit_exceeded',
            `This account already has ${o.running + line.queue.length} console requests under way; wait for one to finish.`,
            { headers: { 'retry-after': '1' } },
          );
        // The slot passes from the piece that ends straight to this one: `running` does not change.
        await new Promise<void>((resolve) => line.queue.push(resolve));
      }
      try {
        return await fn();
      } finally {
        release(account, line);
      }
    },
    load(account) {
      const line = lines.get(account);
      return { running: line?.running ?? 0, waiting: line?.queue.length ?? 0 };
    },
  };
}
