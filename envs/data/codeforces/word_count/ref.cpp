#include <bits/stdc++.h>
using namespace std;
int main() {
    string w;
    int k = 0;
    while (cin >> w) k++;
    cout << k << endl;
    return 0;
}
