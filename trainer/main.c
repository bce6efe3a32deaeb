/* main.c: the `weft` command (placeholder until the trainer lands). */
#include <stdio.h>

int main(void)
{
	fprintf(stderr, "weft: not built yet\n");
	return 1;
}
