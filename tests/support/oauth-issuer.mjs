// A fake OAuth 2.1 authorization server on 127.0.0.1 for the `oauth` client-authentication tests:
// its own RSA and P-256 signing keys, a JWKS, RFC 8414 metadata, a token endpoint
// (client_credentials, and authorization_code with PKCE after an authorize endpoint that approves
// at once), dynamic client registration (RFC 7591), and `mint()` to sign any token the refusal
// tests need (also wrongly: `alg: none`, HS256 with the public key as secret, foreign keys).
// A client registered with a `publicKey` authenticates by private_key_jwt (RFC 7523 §2.2): its
// assertion is verified with that key, and refused with 401 invalid_client and the reason for a
// bad signature, another algorithm, iss/sub other than the client, an aud other than the issuer
// or its token endpoint, an expired or overlong assertion, or a jti used before.
import { createHash, createHmac, generateKeyPairSync, randomBytes, sign, verify } from 'node:crypto';

import { listenLoopback, readBody } from './loopback-server.mjs';

const b64url = (buf) => Buffer.from(buf).toString('base64url');
const json = (res, status, body, headers = {}) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
};

/** A fresh signing key: {kid, alg, privateKey, publicKey, jwk}. */
export function newKey(alg = 'RS256', kid = `${alg.toLowerCase()}-${randomBytes(4).toString('hex')}`) {
  const { privateKey, publicKey } =
    alg === 'ES256' ? generateKeyPairSync('ec', { namedCurve: 'P-256' }) : generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
  return { kid, alg, privateKey, publicKey, jwk };
}

/**
 * Signs `claims` as a compact JWS. `key` signs (its alg and kid by default); `header` overrides
 * header fields (`kid: undefined` drops it). `alg: 'none'` gives an unsigned token; `hmacSecret`
 * signs HS256 with that secret.
 */
export function signJwt(claims, { key, alg = key?.alg, header = {}, hmacSecret } = {}) {
  const h = { alg, typ: 'at+jwt', kid: key?.kid, ...header };
  for (const k of Object.keys(h)) if (h[k] === undefined) delete h[k];
  const input = `${b64url(JSON.stringify(h))}.${b64url(JSON.stringify(claims))}`;
  let sig;
  if (alg === 'none') sig = Buffer.alloc(0);
  else if (alg === 'HS256') sig = createHmac('sha256', hmacSecret).update(input).digest();
  else if (alg === 'ES256') sig = sign('sha256', Buffer.from(input), { key: key.privateKey, dsaEncoding: 'ieee-p1363' });
  else sig = sign('sha256', Buffer.from(input), key.privateKey);
  return `${input}.${b64url(sig)}`;
}

const ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';

/**
 * Checks a private_key_jwt assertion of `client` ({client_id, publicKey, alg}) for the issuer:
 * {claims, header} or {error} (why it is refused). `seen` holds the jti values used before.
 */
function checkAssertion(assertion, client, { issuer, seen, now }) {
  const parts = String(assertion ?? '').split('.');
  if (parts.length !== 3) return { error: 'the assertion is not a compact JWS' };
  let header;
  let claims;
  try {
    header = JSON.parse(Buffer.from(parts[0], 'base64url'));
    claims = JSON.parse(Buffer.from(parts[1], 'base64url'));
  } catch {
    return { error: 'the assertion is not JSON' };
  }
  const alg = client.alg ?? 'ES256';
  if (header.alg !== alg) return { error: `alg ${header.alg} is not the registered ${alg}`, header, claims };
  const input = Buffer.from(`${parts[0]}.${parts[1]}`);
  const sig = Buffer.from(parts[2], 'base64url');
  const key = alg === 'ES256' ? { key: client.publicKey, dsaEncoding: 'ieee-p1363' } : client.publicKey;
  if (!verify('sha256', input, key, sig)) return { error: 'signature verification failed', header, claims };
  if (claims.iss !== client.client_id || claims.sub !== client.client_id) return { error: 'iss and sub must be the client_id', header, claims };
  const auds = [claims.aud].flat();
  if (!auds.some((a) => a === issuer || a === `${issuer}/token`)) return { error: `aud ${JSON.stringify(claims.aud)} is not this server`, header, claims };
  if (typeof claims.exp !== 'number' || claims.exp <= now) return { error: 'the assertion has expired', header, claims };
  if (typeof claims.iat !== 'number' || claims.iat > now + 30 || claims.exp - claims.iat > 300) return { error: 'iat is missing, in the future, or too long before exp', header, claims };
  if (!claims.jti || seen.has(claims.jti)) return { error: 'jti is missing or was used before', header, claims };
  seen.add(claims.jti);
  return { header, claims };
}

/**
 * Starts the issuer. `clients`: {clientId: {secret, sub}} for client_credentials, or
 * {clientId: {publicKey, alg: 'ES256'|'RS256', sub}} for private_key_jwt (the public half of
 * the client's key, a KeyObject or PEM). Returns {issuer, url, keys: {rsa, ec}, mint(claims,
 * opts), rotate(key), requests, counts, assertions, setClientKey(id, publicKey), stop()};
 * `assertions` records every private_key_jwt check {clientId, header, claims, error?}.
 */
export async function startOAuthIssuer({ clients = {}, scopesSupported = ['mcp:tools', 'read'], ttlSeconds = 300 } = {}) {
  const keys = { rsa: newKey('RS256', 'rsa-1'), ec: newKey('ES256', 'ec-1') };
  const published = [keys.rsa, keys.ec];
  const registered = new Map(Object.entries(clients).map(([id, c]) => [id, { client_id: id, ...c }]));
  const codes = new Map();
  const requests = [];
  const counts = { jwks: 0, metadata: 0, token: 0, register: 0 };
  const assertions = [];
  const seenJti = new Set();
  let issuer = '';

  const now = () => Math.floor(Date.now() / 1000);
  const mint = (claims = {}, opts = {}) => signJwt({ iss: issuer, iat: now(), exp: now() + ttlSeconds, ...claims }, { key: keys.rsa, ...opts });

  const metadata = () => ({
    issuer,
    authorization_endpoint: `${issuer}/authorize`,
    token_endpoint: `${issuer}/token`,
    registration_endpoint: `${issuer}/register`,
    jwks_uri: `${issuer}/jwks`,
    response_types_supported: ['code'],
    grant_types_supported: ['authorization_code', 'client_credentials'],
    code_challenge_methods_supported: ['S256'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt', 'none'],
    token_endpoint_auth_signing_alg_values_supported: ['ES256', 'RS256'],
    scopes_supported: scopesSupported,
  });

  const tokenFor = ({ sub, resource, scope }) => {
    const claims = { sub, client_id: sub, scope: scope ?? '' };
    if (resource) claims.aud = resource;
    return { access_token: mint(claims), token_type: 'Bearer', expires_in: ttlSeconds, scope: scope ?? '' };
  };

  async function handle(req, res) {
    const url = new URL(req.url, issuer);
    const { body, raw } = await readBody(req);
    requests.push({ method: req.method, path: url.pathname, headers: req.headers, raw });
    if (url.pathname === '/.well-known/oauth-authorization-server' || url.pathname === '/.well-known/openid-configuration') {
      counts.metadata += 1;
      return json(res, 200, metadata());
    }
    // /cdn-cgi/access/certs: where Cloudflare Access publishes its keys (the console's Access sign-in).
    if (url.pathname === '/jwks' || url.pathname === '/cdn-cgi/access/certs') {
      counts.jwks += 1;
      return json(res, 200, { keys: published.map((k) => k.jwk) });
    }
    if (url.pathname === '/register' && req.method === 'POST') {
      counts.register += 1;
      const client_id = `dcr-${randomBytes(6).toString('hex')}`;
      const info = { ...body, client_id, client_id_issued_at: now() };
      registered.set(client_id, { ...info, sub: `user-${client_id}` });
      return json(res, 201, info);
    }
    if (url.pathname === '/authorize') {
      // Approves at once: the "user" of a registered client is `user-<client_id>`.
      const p = url.searchParams;
      const client = registered.get(p.get('client_id'));
      if (!client || p.get('response_type') !== 'code' || p.get('code_challenge_method') !== 'S256') {
        return json(res, 400, { error: 'invalid_request' });
      }
      const code = randomBytes(12).toString('hex');
      codes.set(code, { client, challenge: p.get('code_challenge'), redirect: p.get('redirect_uri'), resource: p.get('resource'), scope: p.get('scope') });
      const to = new URL(p.get('redirect_uri'));
      to.searchParams.set('code', code);
      if (p.get('state')) to.searchParams.set('state', p.get('state'));
      res.writeHead(302, { location: to.toString() });
      return res.end();
    }
    if (url.pathname === '/token' && req.method === 'POST') {
      counts.token += 1;
      const form = new URLSearchParams(raw);
      let clientId = form.get('client_id');
      let secret = form.get('client_secret');
      const basic = /^Basic (.+)$/i.exec(req.headers.authorization ?? '');
      if (basic) [clientId, secret] = Buffer.from(basic[1], 'base64').toString().split(':').map(decodeURIComponent);
      const assertion = form.get('client_assertion_type') === ASSERTION_TYPE ? form.get('client_assertion') : undefined;
      if (assertion && !clientId) {
        try {
          clientId = JSON.parse(Buffer.from(assertion.split('.')[1], 'base64url')).iss;
        } catch {
          clientId = undefined;
        }
      }
      const client = registered.get(clientId);
      if (!client) return json(res, 401, { error: 'invalid_client' });
      const grant = form.get('grant_type');
      if (client.publicKey) {
        // A private_key_jwt client: its assertion, never a secret.
        const checked = assertion ? checkAssertion(assertion, client, { issuer, seen: seenJti, now: now() }) : { error: 'no client_assertion' };
        assertions.push({ clientId, ...checked });
        if (checked.error) return json(res, 401, { error: 'invalid_client', error_description: checked.error });
        if (grant !== 'client_credentials') return json(res, 400, { error: 'unsupported_grant_type' });
        return json(res, 200, tokenFor({ sub: client.sub, resource: form.get('resource'), scope: form.get('scope') }));
      }
      if (grant === 'client_credentials') {
        if (client.secret !== secret) return json(res, 401, { error: 'invalid_client' });
        return json(res, 200, tokenFor({ sub: client.sub, resource: form.get('resource'), scope: form.get('scope') }));
      }
      if (grant === 'authorization_code') {
        const c = codes.get(form.get('code'));
        codes.delete(form.get('code'));
        const verifier = form.get('code_verifier') ?? '';
        if (!c || c.client.client_id !== clientId || b64url(createHash('sha256').update(verifier).digest()) !== c.challenge) {
          return json(res, 400, { error: 'invalid_grant' });
        }
        return json(res, 200, tokenFor({ sub: c.client.sub, resource: form.get('resource') ?? c.resource, scope: form.get('scope') ?? c.scope }));
      }
      return json(res, 400, { error: 'unsupported_grant_type' });
    }
    return json(res, 404, { error: 'not_found' });
  }

  const { server, port } = await listenLoopback(handle, (err) => ({ error: 'server_error', error_description: String(err) }));
  issuer = `http://127.0.0.1:${port}`;
  return {
    issuer,
    keys,
    mint,
    counts,
    requests,
    assertions,
    /** Registers (or replaces) the public key of a private_key_jwt client. */
    setClientKey: (id, publicKey) => registered.set(id, { ...(registered.get(id) ?? { client_id: id, sub: id }), publicKey }),
    /** The RSA public key as PEM text: the secret of the HS256 key-confusion attack. */
    publicPem: () => keys.rsa.publicKey.export({ format: 'pem', type: 'spki' }).toString(),
    /** Publishes another key in the JWKS (a rotation). */
    rotate: (key) => published.push(key),
    stop: () =>
      new Promise((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}

