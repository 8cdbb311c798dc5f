// Copies the console's static files to dist/, which Workers Static Assets serves (wrangler.toml
// [assets]): for now the OpenAPI document of the console API, at /console/api/openapi.json.
// It is public documentation (no secrets), served without the Worker's console auth.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const source = path.join(root, 'console', 'openapi.json');
const target = path.join(root, 'dist', 'console', 'api', 'openapi.json');

// Parsed first, so a broken document fails the build instead of being served.
const doc = JSON.parse(fs.readFileSync(source, 'utf8'));
fs.mkdirSync(path.dirname(target), { recursive: true });
fs.writeFileSync(target, `${JSON.stringify(doc, null, 2)}\n`);
