/* cmd_keygen.c: `weft keygen`. */
#include "trainer/cmd_keygen.h"

#include "ps/auth.h"
#include "trainer/cli.h"

#include <stdio.h>

int wf_cmd_keygen(int argc, char **argv, wf_err *err)
{
	const char *out = NULL;
	int force = 0;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"out", WF_FLAG_STR, &out, "DIR", "directory to write the key files to (required)"},
		{"force", WF_FLAG_BOOL, &force, NULL, "replace key files that exist already"},
		{0},
	};
	const wf_command_help help = {
		"weft keygen --out DIR [--force]",
		"Make the ZeroMQ CURVE keys of a parameter-server cluster: DIR/server.pub,\n"
		"server.key, client.pub and client.key (one Z85 key per file; the .key files\n"
		"are secret, mode 0600). Give the same directory to every ps, chief and worker\n"
		"(--key-dir DIR, cluster.key_dir or WEFT_KEY_DIR; on Kubernetes a Secret, see\n"
		"k8s/). Servers then admit only clients holding client.key."};
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	if (rc != 0)
		goto cleanup;
	if (!out) {
		rc = wf_errf(err, WF_EINVAL, "keygen: --out DIR is required (see --help)");
		goto cleanup;
	}
	if ((rc = wf_ps_keys_generate(out, force, err)) != 0)
		goto cleanup;
	printf("wrote %s/server.pub, server.key, client.pub, client.key\n", out);
cleanup:
	wf_cli_list_free(&pos);
	return rc;
}
