// Tollgate runs its TypeScript sources through Node's type stripping, on by default from Node 24 (23.6
// with warnings). On an older Node the first .ts import fails with a stack trace that names neither
// cause nor fix, so every entry point runs this check first and says it in one line. Plain JavaScript:
// it must itself run on the old Node. `npm ci` installs Node 26 (optionalDependencies node-linux-*)
// and `npm run` puts it first on PATH, so this only fires where no such package fits (macOS, Windows)
// or when a script is run with `node` directly.
const MIN = 24;

/** The line an old Node gets: the command to run instead (`command`, else the npm scripts), then the alternative. */
export function nodeMessage(found, command) {
  const instead = command ? `run \`${command}\`` : 'run it through npm: `npm start`, `npm run demo`, `npm test`';
  return `Tollgate needs Node ≥ ${MIN}; found ${found}. \`npm ci\` installs Node 26 into node_modules on Linux and npm/npx put it first on PATH, so after \`npm ci\` ${instead}; or install Node ${MIN}+.`;
}

/** Exits with one line when this Node is too old; returns quietly otherwise. */
export function requireNode(found = process.versions.node, command = undefined) {
  const major = Number(found.split('.')[0]);
  if (major >= MIN) return;
  process.stderr.write(`${nodeMessage(found, command)}\n`);
  process.exit(1);
}

if (import.meta.url === `file://${process.argv[1]}`) requireNode();
