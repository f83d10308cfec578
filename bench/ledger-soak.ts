/**
 * Soak figure for issue 15 (SPEC §10), standalone: Redis `used_memory` per live request with the ledger
 * export on, over more rounds than the soak phase of `npm run bench` (both run bench/soak.ts; its header
 * says how).
 *
 *   node bench/ledger-soak.ts [--rounds 5] [--requests 2000] [--concurrency 16]
 *     → bench/results/ledger-soak.md (and prints it)
 */
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { describeRef } from './git.ts';
import { runSoak } from './soak.ts';
import { soakMarkdown } from './soak-report.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    requests: { type: 'string', default: '2000' },
    concurrency: { type: 'string', default: '16' },
  },
});
const [rounds, requests, concurrency] = [Number(values.rounds), Number(values.requests), Number(values.concurrency)];
const soak = await runSoak({ rounds, requests, concurrency, log: (s) => process.stderr.write(`${s}\n`) });
const md = [
  '# Ledger soak: Redis memory per live request with the export on',
  '',
  `\`node bench/ledger-soak.ts --rounds ${rounds} --requests ${requests} --concurrency ${concurrency}\` at ${describeRef(undefined).label}, ${new Date().toISOString()}.`,
  '',
  ...soakMarkdown(soak),
  '',
].join('\n');
await writeFile(new URL('./results/ledger-soak.md', import.meta.url), md);
process.stdout.write(md);
