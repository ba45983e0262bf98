#include <bits/stdc++.h>
using namespace std;
int main() {
    long long n;
    cin >> n;
    cout << (n > 0 ? "positive" : n < 0 ? "negative" : "zero") << endl;
    return 0;
}
