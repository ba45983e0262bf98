#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <string>
#include <vector>
using namespace std;
int main() {
    unsigned long long n;
    cin >> n;
    string s;
    do { s += char('0' + n % 2); n /= 2; } while (n);
    reverse(s.begin(), s.end());
    cout << s << endl;
    return 0;
}
