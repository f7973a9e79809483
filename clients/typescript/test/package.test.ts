/**
 * The package as published: `npm pack`, installed from the tarball into an empty folder, runs
 * the README's TypeScript example (plain JavaScript as written) against the live server.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

import { afterAll, describe, expect, it } from 'vitest';

import { REPOSITORY } from './server.js';
import { server } from './world.js';

const PACKAGE = resolve(import.meta.dirname, '..');
const run = promisify(execFile);
const folders: string[] = [];

afterAll(async () => {
  await Promise.all(folders.map((folder) => rm(folder, { recursive: true, force: true })));
});

async function readmeExample(): Promise<string> {
  const readme = await readFile(join(REPOSITORY, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1] ?? '');
  const example = blocks.find((block) => block.includes("from 'countersign-client'"));
  if (example === undefined) {
    throw new Error('no TypeScript example in the README');
  }
  return example;
}

describe('npm pack', () => {
  it('ships the built modules and their types, and nothing of the tests', async () => {
    const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: PACKAGE });
    const [packed] = JSON.parse(stdout) as { name: string; files: { path: string }[] }[];
    const paths = packed?.files.map((file) => file.path) ?? [];
    expect(packed?.name).toBe('countersign-client');
    for (const entry of ['index', 'ai', 'openai-agents']) {
      expect(paths).toContain(`dist/${entry}.js`);
      expect(paths).toContain(`dist/${entry}.d.ts`);
    }
    expect(paths.filter((path) => !path.startsWith('dist/')).sort()).toEqual(['README.md', 'package.json']);
  });

  it('installs into an empty folder and runs the README\'s example', async () => {
    const folder = await mkdtemp(join(tmpdir(), 'countersign-pack-'));
    folders.push(folder);
    const { stdout } = await run('npm', ['pack', '--silent', '--pack-destination', folder], { cwd: PACKAGE });
    const tarball = join(folder, stdout.trim().split('\n').at(-1) ?? '');
    await writeFile(join(folder, 'package.json'), JSON.stringify({ name: 'smoke', private: true, type: 'module' }));
    await run('npm', ['install', '--no-audit', '--no-fund', tarball], { cwd: folder });
    await writeFile(join(folder, 'example.js'), await readmeExample());
    const env = { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token };
    const done = await run(process.execPath, ['example.js'], { cwd: folder, env });
    expect(done.stdout).toContain('paying USD 12.50');
  });
});
