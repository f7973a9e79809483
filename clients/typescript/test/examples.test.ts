/**
 * The examples in examples/typescript/ run to completion against the live server, with a person
 * approving the held payment at the web form. They are compiled with the package's own `tsc`
 * inside this package (so they find its dependencies and the built package by its name) and
 * run by Node as a user's program would be.
 */
import { execFile } from 'node:child_process';
import { cp, mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

import { beforeAll, describe, expect, it } from 'vitest';

import { REPOSITORY } from './server.js';
import { decide, pendingCall, server } from './world.js';

const PACKAGE = resolve(import.meta.dirname, '..');
const BUILT = join(PACKAGE, '.examples');
const run = promisify(execFile);

beforeAll(async () => {
  await rm(BUILT, { recursive: true, force: true });
  await mkdir(BUILT);
  await cp(join(REPOSITORY, 'examples', 'typescript'), join(BUILT, 'src'), {
    recursive: true,
    filter: (path) => !path.endsWith('.md'),
  });
  const config = {
    extends: '../tsconfig.json',
    compilerOptions: { rootDir: 'src', outDir: 'out', declaration: false, declarationMap: false, sourceMap: false },
    include: ['src'],
  };
  await writeFile(join(BUILT, 'tsconfig.json'), JSON.stringify(config));
  await run(join(PACKAGE, 'node_modules', '.bin', 'tsc'), ['-p', join(BUILT, 'tsconfig.json')], { cwd: PACKAGE });
});

describe.each(['ai-sdk', 'openai-agents'])('examples/typescript/%s.ts', (example) => {
  it('runs to completion once a person approves the payment', async () => {
    const env = { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token };
    const running = run(process.execPath, [join(BUILT, 'out', `${example}.js`)], { env, timeout: 60_000 });
    await decide((await pendingCall()).id, { approve: true, comment: 'approved by the test' });
    const { stdout } = await running;
    expect(stdout).toContain('done: paid USD 1250.00 to bob');
    expect(stdout).toContain('Invoice INV-0042 is dealt with.');
  });
});
