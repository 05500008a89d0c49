/* count.c: a small deterministic program for the server tests. */
#include <stdio.h>

volatile int counter;

void tick(int i) { counter += i; }

int main(void) {
  for (int i = 1; i <= 4; i++)
    tick(i);
  printf("counter=%d\n", counter);
  return counter; /* 10 */
}
