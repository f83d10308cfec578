// The store contract (SPEC §4, §5): every case runs against each Store implementation, each on a fresh
// store, and ends by checking balance = Σ ledger and held = Σ open holds for every account it touched.
import type { Test } from 'tap';
import { creditCases } from './contract-credit.ts';
import { ledgerCases } from './contract-ledger.ts';
import { recordCases } from './contract-records.ts';
import { consoleCases } from './contract-console.ts';
import { exportCases } from './contract-export.ts';
import { keyControlCases } from './contract-key-controls.ts';
import { batchCases } from './contract-batch.ts';
import { checkInvariants, track, type ContractOptions, type Harness, type MakeStore } from './harness.ts';

export type { ContractOptions, MakeStore } from './harness.ts';

/** Runs the whole contract as subtests of `t`, one fresh store from `makeStore` per case. */
export function runStoreContract(t: Test, makeStore: MakeStore, opts: ContractOptions = {}): void {
  const makePeer = opts.makePeer ?? (async (_t: Test, store) => store);
  const test = (name: string, fn: (t: Test, h: Harness) => Promise<void>) => {
    t.test(name, async (t) => {
      const h = track(await makeStore(t));
      await fn(t, h);
      await checkInvariants(t, h);
    });
  };
  creditCases(test);
  ledgerCases(test);
  recordCases(test, makePeer);
  consoleCases(test);
  exportCases(test);
  keyControlCases(test);
  batchCases(test);
}
