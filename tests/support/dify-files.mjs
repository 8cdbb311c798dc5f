// Files in the fake Dify (dify-fixture.mjs): `POST /v1/files/upload` (multipart), the file
// values of runs and chat messages checked as Dify checks them, and file objects for outputs.
//
// Upload (`POST /v1/files/upload`, multipart/form-data with a `file` part and a `user` field):
//   201 {id, name, size, extension, mime_type, created_by, created_at}. Refusals, as Dify words them:
//   not multipart                → 415 unsupported_media_type
//   no `file` part               → 400 no_file_uploaded "Please upload your file."
//   more than one file           → 400 too_many_files "Only one file is allowed."
//   no user                      → 400 invalid_param "user is required"
//   empty file name              → 400 filename_not_exists_error "The specified filename does not exist."
//   extension in uploadBlacklist → 415 unsupported_file_type "File type not allowed."
//   over the size limit of its type (system_parameters: file 15 MB, image 10, audio 50, video 100;
//   the app's uploadLimitBytes, when set, for every type) → 413 file_too_large "File size exceeded. ..."
//
// File values (inputs of `file` / `file-list` variables, and a chat's `files`), as Dify's
// file factory refuses them (400 invalid_param):
//   not an object / not a list                     "<var> in input form must be a file" / "... a list of files"
//   type not one of document|image|audio|video|custom → "Invalid file type"
//   transfer_method not remote_url|local_file         → "Invalid transfer method"
//   remote_url without an http(s) `url`               → "Invalid file url"
//   local_file without `upload_file_id`               → "Missing file upload_file_id"
//   an upload_file_id this app did not upload         → "Invalid upload file id"
//   a type that is not the file's (custom excepted)   → "Detected file type does not match the specified type. Please verify the file."
//   a type the variable does not allow                → "File validation failed for file: <name>"
//   more files than a file-list's max_length          → "Invalid number of files"
//   `files` for an app whose file_upload is off       → "file upload is not enabled for this app" (stricter than Dify, which ignores them)

import { randomUUID } from 'node:crypto';

export const FILE_TYPES = ['document', 'image', 'audio', 'video', 'custom'];
const EXTENSIONS = {
  image: ['jpg', 'jpeg', 'png', 'webp', 'gif', 'svg'],
  document: ['txt', 'markdown', 'md', 'mdx', 'pdf', 'html', 'htm', 'xlsx', 'xls', 'vtt', 'properties', 'doc', 'docx', 'csv', 'eml', 'msg', 'pptx', 'ppt', 'xml', 'epub', 'json'],
  audio: ['mp3', 'm4a', 'wav', 'amr', 'mpga'],
  video: ['mp4', 'mov', 'mpeg', 'webm'],
};
/** Dify's default system_parameters (MB). */
export const DEFAULT_SYSTEM_PARAMETERS = Object.freeze({
  file_size_limit: 15,
  image_file_size_limit: 10,
  audio_file_size_limit: 50,
  video_file_size_limit: 100,
});

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

export function extensionOf(name) {
  const m = /\.([A-Za-z0-9]{1,16})$/.exec(String(name ?? '').split(/[?#]/)[0]);
  return m ? m[1].toLowerCase() : '';
}

/** Dify's type of a file by its extension (custom when none fits). */
export function typeOfExtension(ext) {
  for (const [type, list] of Object.entries(EXTENSIONS)) if (list.includes(ext)) return type;
  return 'custom';
}

/** The parts of a multipart/form-data body: [{name, filename, contentType, data: Buffer}]. */
export function multipartParts(raw, contentType) {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType ?? '');
  if (!m) return null;
  const delimiter = Buffer.from(`--${m[1] ?? m[2]}`);
  const parts = [];
  let at = raw.indexOf(delimiter);
  while (at >= 0) {
    let start = at + delimiter.length;
    if (raw.subarray(start, start + 2).toString() === '--') break;
    if (raw.subarray(start, start + 2).toString() === '\r\n') start += 2;
    const headEnd = raw.indexOf('\r\n\r\n', start);
    if (headEnd < 0) break;
    const next = raw.indexOf(Buffer.concat([Buffer.from('\r\n'), delimiter]), headEnd + 4);
    if (next < 0) break;
    const head = raw.subarray(start, headEnd).toString('utf8');
    const param = (key) => new RegExp(`;\\s*${key}="([^"]*)"`, 'i').exec(head)?.[1];
    parts.push({
      name: param('name'),
      filename: param('filename'),
      contentType: /^content-type:\s*(.+)$/im.exec(head)?.[1]?.trim() ?? 'application/octet-stream',
      data: raw.subarray(headEnd + 4, next),
    });
    at = next + 2;
  }
  return parts;
}

/** Reads a request's whole body as bytes. */
export async function readRaw(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks);
}

/**
 * The upload endpoint's answer for `raw` sent by `app`: {status, body} (and the upload
 * recorded in `uploads` on success).
 */
export function upload(app, uploads, raw, contentType) {
  const err = (status, code, message) => ({ status, body: { code, message, status } });
  if (!/^multipart\/form-data/i.test(contentType ?? '')) return err(415, 'unsupported_media_type', 'the upload must be multipart/form-data');
  const parts = multipartParts(raw, contentType) ?? [];
  const files = parts.filter((p) => p.name === 'file' && p.filename !== undefined);
  const user = parts.find((p) => p.name === 'user')?.data.toString('utf8');
  if (files.length === 0) return err(400, 'no_file_uploaded', 'Please upload your file.');
  if (files.length > 1) return err(400, 'too_many_files', 'Only one file is allowed.');
  if (!user) return err(400, 'invalid_param', 'user is required');
  const [file] = files;
  if (!file.filename) return err(400, 'filename_not_exists_error', 'The specified filename does not exist.');
  const extension = extensionOf(file.filename);
  if ((app.uploadBlacklist ?? []).includes(extension)) return err(415, 'unsupported_file_type', 'File type not allowed.');
  const type = typeOfExtension(extension);
  const limits = app.systemParameters ?? DEFAULT_SYSTEM_PARAMETERS;
  const mb = { image: limits.image_file_size_limit, audio: limits.audio_file_size_limit, video: limits.video_file_size_limit }[type] ?? limits.file_size_limit;
  const limit = app.uploadLimitBytes ?? mb * 1024 * 1024;
  if (file.data.length > limit) {
    return err(413, 'file_too_large', `File size exceeded. ${file.data.length} > ${limit}`);
  }
  const id = randomUUID();
  const record = {
    id,
    name: file.filename,
    size: file.data.length,
    extension,
    mime_type: file.contentType,
    created_by: user,
    created_at: Math.floor(Date.now() / 1000),
  };
  uploads.set(id, { ...record, apiKey: app.apiKey, user, data: Buffer.from(file.data) });
  return { status: 201, body: record };
}

/** Why a file value is refused (Dify's words), or null. */
function fileProblem(value, variable, allowed, uploads, app) {
  if (!isPlainObject(value)) return `${variable} in input form must be a file`;
  if (!FILE_TYPES.includes(value.type)) return 'Invalid file type';
  let name;
  if (value.transfer_method === 'remote_url') {
    if (typeof value.url !== 'string' || !/^https?:\/\//.test(value.url)) return 'Invalid file url';
    name = value.url;
  } else if (value.transfer_method === 'local_file') {
    if (typeof value.upload_file_id !== 'string' || !value.upload_file_id) return 'Missing file upload_file_id';
    const up = uploads.get(value.upload_file_id);
    if (!up || up.apiKey !== app.apiKey) return 'Invalid upload file id';
    name = up.name;
  } else {
    return 'Invalid transfer method';
  }
  const detected = typeOfExtension(extensionOf(name));
  if (value.type !== 'custom' && extensionOf(name) && detected !== value.type) {
    return 'Detected file type does not match the specified type. Please verify the file.';
  }
  if (Array.isArray(allowed) && allowed.length > 0 && !allowed.includes(value.type)) {
    return `File validation failed for file: ${name}`;
  }
  return null;
}

function uploadEnabled(fileUpload) {
  if (!isPlainObject(fileUpload)) return false;
  if (fileUpload.enabled === true) return true;
  return Object.values(fileUpload).some((f) => isPlainObject(f) && f.enabled === true);
}

/** Why the file values of a run body are refused, or null. `vars`: the form's variables. */
export function filesProblem(app, body, vars, uploads) {
  for (const v of vars) {
    const value = body.inputs?.[v.variable];
    if (value === undefined || value === null || value === '') continue;
    if (v.type === 'file') {
      const p = fileProblem(value, v.variable, v.allowed_file_types, uploads, app);
      if (p) return p;
    } else if (v.type === 'file-list') {
      if (!Array.isArray(value)) return `${v.variable} in input form must be a list of files`;
      if (Number.isInteger(v.max_length) && value.length > v.max_length) return 'Invalid number of files';
      for (const f of value) {
        const p = fileProblem(f, v.variable, v.allowed_file_types, uploads, app);
        if (p) return p;
      }
    }
  }
  if (body.files !== undefined && body.files !== null) {
    if (!uploadEnabled(app.fileUpload)) return 'file upload is not enabled for this app';
    if (!Array.isArray(body.files)) return 'files must be a list';
    for (const f of body.files) {
      const p = fileProblem(f, 'files', null, uploads, app);
      if (p) return p;
    }
  }
  return null;
}

/**
 * A file object as Dify returns one in workflow outputs, served by the fixture at its url:
 * fileOutput(origin, {name, mimeType, data}) → {dify_model_identity, id, type, transfer_method,
 * filename, extension, mime_type, size, url}.
 */
export function fileObject(origin, served, { name = 'result.png', mimeType, data = Buffer.from('fixture file') } = {}) {
  const id = randomUUID();
  const extension = extensionOf(name);
  const bytes = Buffer.isBuffer(data) ? data : Buffer.from(String(data));
  served.set(`/files/tools/${id}.${extension}`, { data: bytes, mimeType: mimeType ?? 'application/octet-stream' });
  return {
    dify_model_identity: '__dify__file__',
    id,
    tenant_id: 'fixture',
    type: typeOfExtension(extension),
    transfer_method: 'tool_file',
    related_id: id,
    filename: name,
    extension: `.${extension}`,
    mime_type: mimeType ?? 'application/octet-stream',
    size: bytes.length,
    url: `${origin}/files/tools/${id}.${extension}?timestamp=${Math.floor(Date.now() / 1000)}&nonce=n&sign=fixture`,
  };
}

/** The `message_file` event of a file object in a chat stream. */
export function messageFileEvent(file, base) {
  return { event: 'message_file', id: file.id, type: file.type, belongs_to: 'assistant', url: file.url, conversation_id: base.conversation_id };
}
