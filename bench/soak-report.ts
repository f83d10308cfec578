/**
 * What the soak (bench/soak.ts) reports and its Markdown, apart from the soak itself so that the bench
 * report and `--render` load nothing of src/.
 */

export interface SoakRound {
  round: number;
  /** Requests sent so far, the warm-up round included. */
  total: number;
  /** used_memory once the round's holds are settled, before the passes. */
  usedBefore: number;
  /** After the export pass (export, then trim). */
  usedAfterExport: number;
  /** After the reaper pass too. */
  usedAfter: number;
  /** (usedBefore − usedAfterExport) / N: a request's ledger entry in the stream. */
  exportFreedPerReq: number;
  /** (usedAfterExport − usedAfter) / N: a request's field in its hold bucket. */
  reaperFreedPerReq: number;
  /** (usedAfter − baseline) / requests since the baseline: includes round 1's one-off growth. */
  sinceBaselinePerReq: number;
  /** (usedAfter − the previous round's usedAfter) / N; round 1: against the baseline. */
  growthPerReq: number;
  xlenBefore: number;
  xlenAfter: number;
  /** DBSIZE after the passes. */
  keys: number;
  exported: number;
  objects: number;
  exportMs: number;
}

export interface SoakResult {
  rounds: SoakRound[];
  /** used_memory after the warm-up round, its export and its reaper pass. */
  baseline: number;
  baselineKeys: number;
  requests: number;
  concurrency: number;
  holdTtlMs: number;
  /**
   * Retained per request in steady state: (last round's usedAfter − round 1's) / requests of rounds 2…R,
   * so one-off growth in round 1 does not read as per-request cost (NaN with one round).
   */
  retainedPerReq: number;
}

const fmtKB = (bytes: number) => `${(bytes / 1000).toFixed(1)} KB`;

/** The soak's table and how to read it (Markdown lines), for ledger-soak.md and the bench report. */
export function soakMarkdown(s: SoakResult): string[] {
  return [
    '| round | requests | used_memory before the passes | after export + trim | after the reaper | freed by export + trim, per request | freed by the reaper, per request | growth per request since the previous round | since the baseline | ledger XLEN | keys | export pass |',
    '|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|',
    ...s.rounds.map(
      (r) =>
        `| ${r.round} | ${r.total} | ${r.usedBefore} | ${r.usedAfterExport} | ${r.usedAfter} | ${r.exportFreedPerReq.toFixed(1)} | ${r.reaperFreedPerReq.toFixed(1)} | ${r.growthPerReq.toFixed(1)} | ${r.sinceBaselinePerReq.toFixed(1)} | ${r.xlenBefore} → ${r.xlenAfter} | ${r.keys} | ${r.exported} entries in ${r.objects} objects, ${r.exportMs.toFixed(0)} ms |`,
    ),
    '',
    `Live, non-streaming requests (16 completion tokens), ${s.requests} per round, ${s.concurrency} in flight, through an in-process gateway`,
    `on its own redis-server (no persistence), ledger export on to a local s3rver bucket with \`retention_days: 0\`. After each round, once`,
    `every hold is settled and its hold bucket due (hold TTL ${s.holdTtlMs / 1000} s here, 660 s with the defaults), one export pass`,
    '(`POST /admin/ledger/export`: export, then trim) and one reaper pass. Baseline: used_memory after a warm-up round and its',
    `passes (${s.baseline} bytes, ${s.baselineKeys} keys). "Freed by export + trim" is a request's ledger entry in the stream (what`,
    'stays per request, forever, with the export disabled); "freed by the reaper" is its field in its hold bucket (kept until the',
    'reaper passes the bucket: the hold TTL). Memory is flat when used_memory after the passes and the key count stay',
    'level from round to round. **Retained per request**: (last round − round 1, after the passes) / requests of the rounds in',
    `between = ${Number.isFinite(s.retainedPerReq) ? s.retainedPerReq.toFixed(1) : '–'} bytes; "since the baseline" also spreads the growth of round 1 (${fmtKB(s.rounds[0]!.usedAfter - s.baseline)},`,
    'a one-off step in every run so far, not identified) over the requests so far, so it falls round after round.',
  ];
}
