/** A bad config file: names the field path so the operator can fix it without reading code. */
export class ConfigError extends Error {
  readonly path: string;
  constructor(path: string, problem: string) {
    super(`config: ${path}: ${problem}`);
    this.name = 'ConfigError';
    this.path = path;
  }
}
