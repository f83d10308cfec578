/**
 * Runs the simulator as its own process for the demo and benchmarks:
 *   node src/simulator/cli.ts [--port 8000] [--host 127.0.0.1] [--models a,b] [--record]
 * Prints the base URL (e.g. `http://127.0.0.1:8000/v1`) as its only stdout line once listening, and
 * exits 0 on SIGINT/SIGTERM. Records are off by default: nobody can read them from outside.
 */
import { parseArgs } from 'node:util';
import { startSimulator, type SimulatorOptions } from './simulator.ts';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '8000' },
    host: { type: 'string', default: '127.0.0.1' },
    models: { type: 'string' },
    record: { type: 'boolean', default: false },
  },
});

const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write(`simulator: --port must be 0-65535, got ${values.port}\n`);
  process.exit(2);
}
const opts: SimulatorOptions = { port, host: values.host, record: values.record };
if (values.models !== undefined) opts.modelIds = values.models.split(',').filter((m) => m !== '');

const sim = await startSimulator(opts);
process.stdout.write(`${sim.url}\n`);

const stop = (): void => {
  sim.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
