/*
 * keygen.c: `apf keygen [-o NAME]`: a new Ed25519 key pair, NAME.key.pem
 * (0600) and NAME.pub.pem, by default $APF_HOME/keys/default; the public half
 * is also added to $APF_HOME/trusted/ unless --no-trust.
 */
#include "cmd.h"

#include <stdlib.h>
#include <string.h>

#include "sign/sign.h"

int cmd_keygen(int argc, char **argv)
{
	const char *name = NULL;
	int no_trust = 0;
	const struct apf_opt opts[] = {
		{"output", 'o', OPT_STRING, &name, "NAME",
		 "write NAME.key.pem and NAME.pub.pem"},
		{"no-trust", 0, OPT_FLAG, &no_trust, NULL,
		 "do not add the public key to $APF_HOME/trusted/"},
		{0},
	};
	const struct apf_usage usage = {
		"keygen [-o NAME] [--no-trust]",
		"Generate an Ed25519 key pair for signing entries and run logs, "
		"and print its\nkey id (SHA-256 of the public key's DER "
		"encoding).",
		"Without -o the pair is $APF_HOME/keys/default.{key,pub}.pem "
		"($APF_HOME defaults\nto ~/.config/apf). Existing key files are "
		"never overwritten.",
		0, 0,
		"apf keygen\n"
		"apf keygen -o runner --no-trust"};
	int nargs, rc = cmd_start("keygen", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	char *priv = NULL, *pub = NULL;
	if (name) {
		apf_buf a = {0}, b = {0};
		if (apf_buf_printf(&a, "%s.key.pem", name) ||
		    apf_buf_printf(&b, "%s.pub.pem", name)) {
			apf_buf_free(&a);
			apf_buf_free(&b);
			apf_error(APF_ENOMEM, "keygen", "out of memory");
			return cmd_fail(APF_ENOMEM);
		}
		priv = a.data;
		pub = b.data;
	} else {
		rc = apf_key_default_paths(&priv, &pub);
		if (!rc) {
			char *dir = apf_strdup(priv);
			*strrchr(dir, '/') = 0;
			rc = apf_mkdirs(dir, 0700);
			free(dir);
		}
		if (rc)
			return cmd_fail(rc);
	}
	apf_key *k = NULL;
	char *trusted = NULL;
	rc = apf_key_generate(&k);
	if (!rc)
		rc = apf_key_save(k, priv, pub);
	if (!rc && !no_trust)
		rc = apf_key_trust(k, &trusted);
	if (!rc) {
		char id[APF_KEYID_HEX];
		apf_key_id(k, id);
		printf("%s\n", id);
		fprintf(stderr, "apf: keygen: private key %s, public key %s%s%s\n",
			term_text(priv), term_text(pub),
			trusted ? ", trusted as " : "",
			trusted ? term_text(trusted) : "");
	}
	apf_key_free(k);
	free(priv);
	free(pub);
	free(trusted);
	return rc ? cmd_fail(rc) : 0;
}
