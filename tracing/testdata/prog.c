#include <stdio.h>
#include <string.h>
int counter;
char buf[32] = "hello tracepoints";
struct pt { int x, y; } points[4];
int work(int n) {
  int local = n * 3;
  counter += n;
  points[n & 3].x = n;
  points[n & 3].y = local;
  return local;
}
int main(void) {
  int s = 0;
  for (int i = 0; i < 20; i++) s += work(i);
  printf("%d %s\n", s, buf);
  return 0;
}
