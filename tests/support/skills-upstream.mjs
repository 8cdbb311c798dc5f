// The Skills extension of MCP (SEP-2640, `io.modelcontextprotocol/skills`, with `directoryRead`)
// for the hand-written 2026-07-28 upstream fixture (input-required-upstream.mjs): two skills
// served as skill:// resources (SKILL.md listed in resources/list, every file readable with
// resources/read), skills/list (one skill a page, so paging is exercised), skills/get and
// resources/directory/read (two children a page). `createSkills(prefix)` puts every skill under
// a first path segment of its own, so two fixtures can serve distinct skills side by side.
import { createHash } from 'node:crypto';

export const EXTENSION = 'io.modelcontextprotocol/skills';
const DIRECTORY = 'inode/directory';
const DIR_PAGE = 2;

const skillMd = (frontmatter, body) =>
  `---\n${Object.entries(frontmatter).map(([k, v]) => `${k}: ${v}`).join('\n')}\n---\n\n${body}\n`;

/** The skills: path → {frontmatter, files: {relative path → text}}. */
const SKILLS = {
  'pdf-processing': {
    frontmatter: { name: 'pdf-processing', description: 'Extract, fill, and assemble PDF documents', license: 'Apache-2.0' },
    body: '# PDF processing\n\nRead `references/FORMS.md` first, then pick a template from `templates/`.',
    files: {
      'references/FORMS.md': '# Forms\n\nFill every field; leave none blank.\n',
      'templates/invoice.md': '# Invoice\n\nNumber, date, lines, total.\n',
      'templates/regional/eu-invoice.md': '# EU invoice\n\nAdd the VAT number.\n',
    },
  },
  'acme/billing/refunds': {
    frontmatter: { name: 'refunds', description: 'Process customer refund requests per company policy' },
    body: '# Refunds\n\nSee `examples/email.md` for the reply.',
    files: { 'examples/email.md': 'Dear customer, your refund is on its way.\n' },
  },
};

const digest = (text) => `sha256:${createHash('sha256').update(text, 'utf8').digest('hex')}`;
const mimeOf = (uri) => (uri.endsWith('.md') ? 'text/markdown' : 'text/plain');

/** The skills of one fixture, every skill path under `prefix` (none: as above). */
export function createSkills(prefix = '') {
  const root = (path) => `skill://${prefix ? `${prefix}/` : ''}${path}`;
  /** uri → text, every file of every skill. */
  const files = new Map();
  const entries = Object.entries(SKILLS).map(([path, s]) => {
    const dir = root(path);
    const md = skillMd(s.frontmatter, s.body);
    const own = [[`${dir}/SKILL.md`, md], ...Object.entries(s.files).map(([rel, text]) => [`${dir}/${rel}`, text])];
    for (const [uri, text] of own) files.set(uri, text);
    return {
      uri: `${dir}/SKILL.md`,
      frontmatter: s.frontmatter,
      resources: own.map(([uri, text]) => ({ uri, digest: digest(text), size: Buffer.byteLength(text, 'utf8') })),
    };
  });
  const byUri = new Map(entries.map((e) => [e.uri, e]));
  const resources = entries.map((e) => ({ uri: e.uri, name: e.frontmatter.name, description: e.frontmatter.description, mimeType: 'text/markdown' }));
  const isDirectory = (uri) => !files.has(uri) && [...files.keys()].some((f) => f.startsWith(`${uri}/`));

  /** The direct children of a directory: files with their metadata, subdirectories as directories. */
  function children(dir) {
    const out = new Map();
    for (const f of files.keys()) {
      if (!f.startsWith(`${dir}/`)) continue;
      const [name, ...rest] = f.slice(dir.length + 1).split('/');
      const uri = `${dir}/${name}`;
      if (!out.has(uri)) out.set(uri, rest.length ? { uri, name, mimeType: DIRECTORY } : { uri, name, mimeType: mimeOf(uri) });
    }
    return [...out.values()];
  }

  return {
    capability: { [EXTENSION]: { directoryRead: true } },
    resources,
    /** Every file the fixture serves, uri → text (for the tests' own checks). */
    files,
    /** Answers a skills method or resources/read|directory/read; undefined for other methods. */
    handle(method, p, { RpcError }) {
      const invalid = (why) => new RpcError(-32602, `Invalid params: ${why}`);
      const cacheable = { ttlMs: 0, cacheScope: 'public' };
      switch (method) {
        case 'skills/list': {
          const at = p.cursor === undefined ? 0 : Number(p.cursor);
          if (!Number.isInteger(at) || at < 0 || at >= entries.length) throw invalid('unknown cursor');
          return { skills: [entries[at]], ...(at + 1 < entries.length ? { nextCursor: String(at + 1) } : {}), ...cacheable };
        }
        case 'skills/get': {
          const skill = byUri.get(p.uri);
          if (!skill) throw invalid(`no skill is served at ${p.uri}`);
          return { skill, ...cacheable };
        }
        case 'resources/read': {
          if (!files.has(p.uri)) throw new RpcError(-32602, `Resource not found: ${p.uri}`, 200, { uri: p.uri });
          return { contents: [{ uri: p.uri, mimeType: mimeOf(p.uri), text: files.get(p.uri) }], ...cacheable };
        }
        case 'resources/directory/read': {
          if (!isDirectory(p.uri)) throw invalid(`${p.uri} is not a directory resource`);
          const all = children(p.uri);
          const at = p.cursor === undefined ? 0 : Number(p.cursor);
          if (!Number.isInteger(at) || at < 0 || at >= Math.max(all.length, 1)) throw invalid('unknown cursor');
          const next = at + DIR_PAGE < all.length ? { nextCursor: String(at + DIR_PAGE) } : {};
          return { resources: all.slice(at, at + DIR_PAGE), ...next };
        }
        default:
          return undefined;
      }
    },
  };
}
