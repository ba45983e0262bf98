#include <bits/stdc++.h>
using namespace std;
int main() {
    double r;
    cin >> r;
    printf("%.9f\n", M_PI * r * r);
    return 0;
}
