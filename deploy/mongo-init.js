// The platform's MongoDB user, created by the official image's entrypoint on
// the first start of an empty data volume (/docker-entrypoint-initdb.d, run
// as the root user of MONGO_INITDB_ROOT_*). The services log in as `acme`
// (compose.yaml: MONGO_USER, MONGO_PASSWORD_FILE, authSource=acme) and may
// read and write the `acme` database only: no other database, no user or
// server administration. The password is the compose secret
// mongo_app_password (MONGO_APP_PASSWORD in .env), at ACME_APP_PASSWORD_FILE.
const fs = require('fs');
const password = fs.readFileSync(process.env.ACME_APP_PASSWORD_FILE, 'utf8').trim();
if (password.length < 16) {
  throw new Error('mongo_app_password is missing or shorter than 16 characters');
}
const acme = db.getSiblingDB('acme');
if (acme.getUser('acme') === null) {
  acme.createUser({ user: 'acme', pwd: password, roles: [{ role: 'readWrite', db: 'acme' }] });
  print('acme: created user acme (readWrite on acme)');
}
