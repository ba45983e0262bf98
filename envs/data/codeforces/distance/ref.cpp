#include <bits/stdc++.h>
using namespace std;
int main() {
    double a, b, c, d;
    cin >> a >> b >> c >> d;
    printf("%.9f\n", hypot(c - a, d - b));
    return 0;
}
